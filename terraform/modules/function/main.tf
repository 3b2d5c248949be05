# One Lambda function from a prebuilt zip, with its own role, log group and (optionally) one
# trigger of each kind Loom uses: an SQS event source mapping, an EventBridge schedule and a
# Function URL. IAM lives in iam.tf.
locals {
  log_group_name = "/aws/lambda/${var.name}"
  # The environment's size as Lambda measures it against its 4 KB: the JSON of the variables, in UTF-8 bytes
  # (base64 carries the bytes: three for every four characters, less its padding). Terraform's jsonencode
  # writes < > & as \u escapes, which can only count a little more than Lambda does.
  environment_b64   = base64encode(jsonencode(var.environment_variables))
  environment_bytes = length(local.environment_b64) * 3 / 4 - length(regexall("=", local.environment_b64))
}

resource "aws_cloudwatch_log_group" "this" {
  count = var.create ? 1 : 0

  #checkov:skip=CKV_AWS_158:A customer-managed KMS key is optional (var.log_kms_key_id); CloudWatch Logs always encrypts log data at rest with service-owned keys.
  #checkov:skip=CKV_AWS_338:Retention is an input (log_retention_days, default 30 days to keep log storage cheap); production environments choose their own, e.g. 365.

  name              = local.log_group_name
  retention_in_days = var.log_retention_days
  kms_key_id        = var.log_kms_key_id

  tags = var.tags
}

resource "aws_lambda_function" "this" {
  count = var.create ? 1 : 0

  #checkov:skip=CKV_AWS_50:Active X-Ray tracing is an input (tracing_mode = "Active"; default PassThrough, which still propagates the trace header Lambda's recursive-loop detection reads): it needs xray:PutTraceSegments on Resource "*", so the AWS managed AWSXRayDaemonWriteAccess policy is attached only when chosen.
  #checkov:skip=CKV_AWS_116:No async-invoke DLQ: the worker (SQS event source) and control plane (Function URL) are invoked synchronously and the worker's failures go to the step queue's DLQ; the sweeper is idempotent and runs again a minute later.
  #checkov:skip=CKV_AWS_117:A VPC is an input (vpc_config): modules/loom passes worker_vpc_config to the worker, whose workflow steps may reach private resources. Loom's own calls go only to DynamoDB, SQS and CloudWatch endpoints, so the sweeper and control plane run outside a VPC (no NAT or endpoint costs).
  #checkov:skip=CKV_AWS_272:Code signing is not used: artifacts are built reproducibly by `make build` and deployed by Terraform from their sha256 (source_code_hash).
  #checkov:skip=CKV_AWS_173:Environment variables hold only resource names and tuning numbers, no secrets; a customer-managed key for them is optional (var.kms_key_arn).

  function_name = var.name
  description   = var.description
  role          = aws_iam_role.this[0].arn

  filename         = var.zip_path
  source_code_hash = filebase64sha256(var.zip_path)
  handler          = var.handler
  runtime          = var.runtime
  # Must match the zip's wheels: `make build` builds x86_64 ones, `make build LAMBDA_ARCH=arm64` arm64 ones.
  architectures = [var.architecture]

  memory_size                    = var.memory_mb
  timeout                        = var.timeout_s
  reserved_concurrent_executions = var.reserved_concurrency
  kms_key_arn                    = var.kms_key_arn

  environment {
    variables = var.environment_variables
  }

  tracing_config {
    mode = var.tracing_mode
  }

  dynamic "vpc_config" {
    for_each = var.vpc_config == null ? [] : [var.vpc_config]
    content {
      subnet_ids         = vpc_config.value.subnet_ids
      security_group_ids = vpc_config.value.security_group_ids
    }
  }

  tags = var.tags

  lifecycle {
    precondition {
      # Lambda refuses a function whose environment exceeds 4 KB, measured as the variables written out as JSON
      # (quotes, colons, commas and the escapes of a value's own quotes count; bytes, in UTF-8); say so here.
      condition     = local.environment_bytes <= 4096
      error_message = "${var.name}: its environment variables are ${local.environment_bytes} bytes as Lambda measures them (written out as JSON), over Lambda's 4 KB: shorten extra_environment_variables, schedule inputs or workflow_access."
    }
  }

  # The log group and the permissions (to write to it; to create the VPC's network interfaces) exist
  # before the first invocation, so Lambda never creates an unmanaged log group without retention.
  depends_on = [aws_cloudwatch_log_group.this, aws_iam_role_policy.this, aws_iam_role_policy_attachment.managed]
}

# Lambda stops a chain of invocations after 16 hops through SQS/SNS/Lambda unless the function
# allows recursive loops. The worker re-enqueues its own next step on purpose, so it sets Allow and
# relies on Loom's own caps (LOOM_MAX_STEPS, LOOM_MAX_TOTAL_ATTEMPTS) instead. Emulators that do not
# implement PutFunctionRecursionConfig (moto 5.2.1 answers 404) use recursive_loop = null.
resource "aws_lambda_function_recursion_config" "this" {
  count = var.create && var.recursive_loop != null ? 1 : 0

  function_name  = aws_lambda_function.this[0].function_name
  recursive_loop = var.recursive_loop
}

resource "aws_lambda_event_source_mapping" "sqs" {
  count = var.create && var.sqs_trigger != null ? 1 : 0

  event_source_arn                   = var.sqs_trigger.queue_arn
  function_name                      = aws_lambda_function.this[0].arn
  enabled                            = var.sqs_trigger.enabled
  batch_size                         = var.sqs_trigger.batch_size
  maximum_batching_window_in_seconds = var.sqs_trigger.batching_window_s

  # Without this the handler's batchItemFailures are ignored and one failed record makes Lambda
  # retry the whole batch (or, worse, delete failures it reported). Not configurable.
  function_response_types = ["ReportBatchItemFailures"]

  # Caps the pollers at what the function may run, so Lambda does not pull messages it can only
  # throttle (throttled receives count towards the DLQ's maxReceiveCount).
  scaling_config {
    maximum_concurrency = var.sqs_trigger.maximum_concurrency
  }

  # The role must be allowed to receive before Lambda validates the mapping.
  depends_on = [aws_iam_role_policy.this]
}

resource "aws_cloudwatch_event_rule" "schedule" {
  count = var.create && var.schedule != null ? 1 : 0

  name                = "${var.name}-schedule"
  description         = "Invokes ${var.name} on ${var.schedule.expression}."
  schedule_expression = var.schedule.expression
  state               = var.schedule.enabled ? "ENABLED" : "DISABLED"

  tags = var.tags
}

resource "aws_cloudwatch_event_target" "schedule" {
  count = var.create && var.schedule != null ? 1 : 0

  rule      = aws_cloudwatch_event_rule.schedule[0].name
  target_id = "lambda"
  arn       = aws_lambda_function.this[0].arn
}

resource "aws_lambda_permission" "schedule" {
  count = var.create && var.schedule != null ? 1 : 0

  statement_id  = "AllowEventBridgeSchedule"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.this[0].function_name
  principal     = "events.amazonaws.com"
  # Only this rule may invoke the function.
  source_arn = aws_cloudwatch_event_rule.schedule[0].arn
}

# AWS_IAM only: callers sign requests with SigV4 and need lambda:InvokeFunctionUrl (and, for URLs
# created since October 2025, lambda:InvokeFunction) in their own identity policy. No CORS.
resource "aws_lambda_function_url" "this" {
  count = var.create && var.create_function_url ? 1 : 0

  function_name      = aws_lambda_function.this[0].function_name
  authorization_type = "AWS_IAM"
}
