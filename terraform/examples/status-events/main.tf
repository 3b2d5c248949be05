# Status-change events: Loom publishes one event per execution that ends or is cancelled to an
# EventBridge bus, and a rule routes the FAILED executions of one workflow to an SNS topic.
# `terraform validate` runs here in `make tf-validate`, and tests/terraform plans it and replays the
# documented sample events through the rule's pattern. The part between the two "sample" markers is
# the sample of terraform/README.md ("Status-change events"), verbatim (a test compares them).
terraform {
  required_version = ">= 1.9"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.67, < 6.0"
    }
  }
}

provider "aws" {
  region = "us-east-1"
}

module "loom" {
  source = "../../modules/loom"

  name = "loom-example"
  lambda_zips = {
    worker        = "${path.module}/../../../dist/lambda/worker.zip"
    sweeper       = "${path.module}/../../../dist/lambda/sweeper.zip"
    control_plane = "${path.module}/../../../dist/lambda/control-plane.zip"
  }

  # Creates the bus "loom-example-events"; { enabled = true, event_bus_name = "<name or ARN>" }
  # publishes to an existing bus instead.
  status_events = { enabled = true }
}

# -- sample: begin ----------------------------------------------------------------------------
resource "aws_sns_topic" "order_failures" {
  #checkov:skip=CKV_AWS_26:EventBridge cannot publish to a topic encrypted with the AWS managed key aws/sns; use a customer-managed key whose policy allows events.amazonaws.com if the notices are sensitive.
  name = "order-fulfillment-failures"
}

# Every FAILED execution of order_fulfillment (not COMPLETED or CANCELLED ones, not other workflows).
resource "aws_cloudwatch_event_rule" "order_failed" {
  name           = "order-fulfillment-failed"
  description    = "Loom: an order_fulfillment execution ended FAILED."
  event_bus_name = module.loom.status_event_bus_name
  event_pattern = jsonencode({
    source        = ["loom"]
    "detail-type" = ["Loom Execution Status Change"]
    detail = {
      workflow = ["order_fulfillment"]
      status   = ["FAILED"]
    }
  })
}

resource "aws_cloudwatch_event_target" "order_failed_to_sns" {
  rule           = aws_cloudwatch_event_rule.order_failed.name
  event_bus_name = aws_cloudwatch_event_rule.order_failed.event_bus_name
  target_id      = "sns"
  arn            = aws_sns_topic.order_failures.arn

  # A readable notice instead of the raw event.
  input_transformer {
    input_paths = {
      id    = "$.detail.execution_id"
      step  = "$.detail.error.step_name"
      code  = "$.detail.error.code"
      error = "$.detail.error.message"
    }
    input_template = "\"Loom: order_fulfillment <id> FAILED at step <step> (<code>): <error>. Fix the step, then: loom redrive <id>\""
  }
}

# EventBridge may publish to the topic, for this rule only.
resource "aws_sns_topic_policy" "order_failures" {
  arn = aws_sns_topic.order_failures.arn
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "EventBridgePublish"
      Effect    = "Allow"
      Principal = { Service = "events.amazonaws.com" }
      Action    = "sns:Publish"
      Resource  = aws_sns_topic.order_failures.arn
      Condition = { ArnEquals = { "aws:SourceArn" = aws_cloudwatch_event_rule.order_failed.arn } }
    }]
  })
}
# -- sample: end ------------------------------------------------------------------------------

output "status_event_bus_name" {
  description = "The bus Loom publishes status-change events to."
  value       = module.loom.status_event_bus_name
}

output "order_failures_topic_arn" {
  description = "Subscribe to this topic to hear about failed order_fulfillment executions."
  value       = aws_sns_topic.order_failures.arn
}
