# Least privilege per function. DynamoDB authorizes TransactWriteItems per item action
# (PutItem/UpdateItem), so no transaction action is listed. Nobody may DeleteItem: retention is
# TTL's job. See docs in terraform/README.md ("IAM").
locals {
  kms_statements = var.kms_key_arn == null ? [] : [{
    sid       = "UseLoomKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.kms_key_arn]
  }]

  worker_statements = concat([
    {
      sid       = "ExecutionItems"
      actions   = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"]
      resources = [module.table.table_arn]
    },
    {
      # What the SQS event source mapping does with the function's role.
      sid       = "ConsumeStepQueue"
      actions   = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ChangeMessageVisibility"]
      resources = [module.queue.queue_arn]
    },
    {
      # Next steps go to the step queue; failure notices go to the DLQ.
      sid       = "SendStepMessages"
      actions   = ["sqs:SendMessage"]
      resources = [module.queue.queue_arn, module.queue.dlq_arn]
    },
  ], local.kms_statements)

  sweeper_statements = concat([
    {
      sid       = "QueryDueIndex"
      actions   = ["dynamodb:Query"]
      resources = [module.table.gsi_arn]
    },
    {
      sid       = "ClaimDueExecutions"
      actions   = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"]
      resources = [module.table.table_arn]
    },
    {
      sid       = "SendStepMessages"
      actions   = ["sqs:SendMessage"]
      resources = [module.queue.queue_arn]
    },
  ], local.kms_statements)

  control_plane_statements = concat([
    {
      sid       = "ExecutionItems"
      actions   = ["dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:Query"]
      resources = [module.table.table_arn]
    },
    {
      sid       = "SendStepMessages"
      actions   = ["sqs:SendMessage"]
      resources = [module.queue.queue_arn]
    },
  ], local.kms_statements)
}
