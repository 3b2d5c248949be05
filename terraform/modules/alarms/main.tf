# The alarms an operator of Loom needs first: something reached the DLQ, step messages are waiting
# too long (workers stuck, throttled or failing), and a function fails.
resource "aws_cloudwatch_metric_alarm" "dlq_depth" {
  count = var.create ? 1 : 0

  alarm_name        = "${var.name_prefix}-dlq-depth"
  alarm_description = "Messages are waiting in ${var.dlq_name}: steps that failed maxReceiveCount deliveries or worker failure notices. Inspect them, fix the cause, then redrive."
  namespace         = "AWS/SQS"
  metric_name       = "ApproximateNumberOfMessagesVisible"
  dimensions        = { QueueName = var.dlq_name }
  statistic         = "Maximum"
  period            = var.period_s

  comparison_operator = "GreaterThanThreshold"
  threshold           = var.dlq_depth_threshold
  evaluation_periods  = 1
  # SQS stops publishing metrics for a queue that has been empty and idle for hours.
  treat_missing_data = "notBreaching"

  alarm_actions = var.alarm_actions
  ok_actions    = var.ok_actions

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "oldest_step_message_age" {
  count = var.create ? 1 : 0

  alarm_name        = "${var.name_prefix}-step-queue-oldest-message-age"
  alarm_description = "The oldest message in ${var.queue_name} is older than ${var.oldest_message_age_threshold_s} s: workers are not keeping up, throttled or failing repeatedly."
  namespace         = "AWS/SQS"
  metric_name       = "ApproximateAgeOfOldestMessage"
  dimensions        = { QueueName = var.queue_name }
  statistic         = "Maximum"
  period            = var.period_s

  comparison_operator = "GreaterThanThreshold"
  threshold           = var.oldest_message_age_threshold_s
  evaluation_periods  = var.evaluation_periods
  treat_missing_data  = "notBreaching"

  alarm_actions = var.alarm_actions
  ok_actions    = var.ok_actions

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "function_errors" {
  for_each = var.create ? var.function_names : {}

  alarm_name        = "${var.name_prefix}-${each.key}-errors"
  alarm_description = "Lambda function ${each.value} returned errors (unhandled exceptions, timeouts or out-of-memory). Its log group /aws/lambda/${each.value} has the details."
  namespace         = "AWS/Lambda"
  metric_name       = "Errors"
  dimensions        = { FunctionName = each.value }
  statistic         = "Sum"
  period            = var.period_s

  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = var.function_errors_threshold
  evaluation_periods  = var.evaluation_periods
  treat_missing_data  = "notBreaching"

  alarm_actions = var.alarm_actions
  ok_actions    = var.ok_actions

  tags = var.tags
}
