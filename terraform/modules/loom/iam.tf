# Least privilege per function. DynamoDB authorizes TransactWriteItems per item action
# (PutItem/UpdateItem), so no transaction action is listed. Nobody may DeleteItem: retention is
# TTL's job. See docs in terraform/README.md ("IAM"). With status_events enabled every function may
# also events:PutEvents on the status bus (events.tf).
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
  ], local.kms_statements, local.status_event_statements)

  sweeper_statements = concat([
    {
      # DUE#<shard> (executions to wake) and FIN#<shard> (ended executions whose housekeeping a
      # dead worker left undone).
      sid       = "QueryDueIndex"
      actions   = ["dynamodb:Query"]
      resources = [module.table.gsi_arn]
    },
    {
      # Claiming re-reads and conditionally rewrites #META; finishing an ended execution's
      # housekeeping queries its STEP# items to set their TTL (engine_core.engine.finalize).
      sid       = "ClaimDueExecutions"
      actions   = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"]
      resources = [module.table.table_arn]
    },
    {
      # Re-driven steps go to the step queue; that housekeeping also sends a FAILED execution's
      # failure notice to the DLQ.
      sid       = "SendStepMessages"
      actions   = ["sqs:SendMessage"]
      resources = [module.queue.queue_arn, module.queue.dlq_arn]
    },
  ], local.kms_statements, local.status_event_statements)

  control_plane_statements = concat([
    {
      # BatchGetItem: a list page reads its live executions' status in one call.
      sid       = "ExecutionItems"
      actions   = ["dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchGetItem"]
      resources = [module.table.table_arn]
    },
    {
      sid       = "SendStepMessages"
      actions   = ["sqs:SendMessage"]
      resources = [module.queue.queue_arn]
    },
  ], local.kms_statements, local.status_event_statements)
}
