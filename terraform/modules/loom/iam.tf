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
      # Starts (PutItem), reads, the operator's actions (the execution's conditional Put and the action's
      # record, one TransactWriteItems of two PutItem), events (conditional UpdateItem), and a list page's
      # live executions' status in one call (BatchGetItem).
      sid       = "ExecutionItems"
      actions   = ["dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchGetItem"]
      resources = [module.table.table_arn]
    },
    {
      # GET /executions (loom list, the console, MCP's list) reads the list index: IAM authorizes a
      # Query of an index on the index's own ARN, not the table's.
      sid       = "QueryListIndex"
      actions   = ["dynamodb:Query"]
      resources = [try("${module.table.table_arn}/index/${module.table.list_index_name}", null)]
    },
    {
      # GET /workflows (loom workflows, loom versions check, the console) counts the executions live on each
      # workflow version: the due index (keys only) lists exactly the live ones.
      sid       = "QueryDueIndex"
      actions   = ["dynamodb:Query"]
      resources = [try("${module.table.table_arn}/index/${module.table.gsi_name}", null)]
    },
    {
      sid       = "SendStepMessages"
      actions   = ["sqs:SendMessage"]
      resources = [module.queue.queue_arn]
    },
  ], local.kms_statements, local.status_event_statements)
}

# What an operator needs (the loom CLI, `loom dlq list/redrive`, the console, the MCP server), published
# as the output operator_policy_json for a team to attach to its operators' role. The end-to-end tests
# check every call those tools make against it.
locals {
  operator_statements = [
    {
      # Every API call: the Function URL is AWS_IAM, so a caller needs InvokeFunctionUrl, and for URLs
      # created since October 2025 also InvokeFunction through the URL.
      Sid       = "CallControlPlaneUrl"
      Effect    = "Allow"
      Action    = ["lambda:InvokeFunctionUrl"]
      Resource  = [module.control_plane.function_arn]
      Condition = { StringEquals = { "lambda:FunctionUrlAuthType" = "AWS_IAM" } }
    },
    {
      Sid       = "InvokeControlPlaneThroughUrl"
      Effect    = "Allow"
      Action    = ["lambda:InvokeFunction"]
      Resource  = [module.control_plane.function_arn]
      Condition = { Bool = { "lambda:InvokedViaFunctionUrl" = "true" } }
    },
    {
      # loom dlq list (receive with visibility 0) and loom dlq redrive (receive, delete, release).
      Sid      = "ReadDeadLetters"
      Effect   = "Allow"
      Action   = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"]
      Resource = [module.queue.dlq_arn]
    },
    {
      # loom dlq redrive returns step messages to the step queue.
      Sid      = "ReturnDeadLetters"
      Effect   = "Allow"
      Action   = ["sqs:SendMessage"]
      Resource = [module.queue.queue_arn]
    },
  ]
  # With a customer-managed key the queues are encrypted with it: receiving from the DLQ needs kms:Decrypt,
  # returning a message to the step queue kms:GenerateDataKey (as the functions' roles have).
  operator_kms_statements = var.kms_key_arn == null ? [] : [{
    Sid      = "UseLoomKey"
    Effect   = "Allow"
    Action   = ["kms:Decrypt", "kms:GenerateDataKey"]
    Resource = [var.kms_key_arn]
  }]
  operator_policy_json = var.create ? jsonencode({
    Version   = "2012-10-17"
    Statement = concat(local.operator_statements, local.operator_kms_statements)
  }) : null
}
