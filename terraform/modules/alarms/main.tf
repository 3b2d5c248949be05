# The alarms an operator of Loom needs: something reached the DLQ, step messages are waiting too
# long (workers stuck, throttled or failing) or nearly as long as their lease, a function fails or
# is throttled, executions end FAILED, DynamoDB throttles, and the sweeper stopped running. Every
# alarm beyond the first three is optional: it exists only when its inputs are set.
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

# ---------------------------------------------------------------------------------------------
# Executions that ended FAILED: a business failure, not a transport one (those reach the DLQ).
# engine-core counts them as ExecutionsFailed through Powertools Metrics, whose only dimension is
# `service` (POWERTOOLS_SERVICE_NAME), so one series per function: the alarm sums them.
# ---------------------------------------------------------------------------------------------
locals {
  failed_executions_enabled = var.create && var.metrics_namespace != null && length(var.metrics_service_names) > 0
}

resource "aws_cloudwatch_metric_alarm" "executions_failed" {
  count = local.failed_executions_enabled ? 1 : 0

  alarm_name        = "${var.name_prefix}-executions-failed"
  alarm_description = "Executions ended FAILED (metric ExecutionsFailed in ${coalesce(var.metrics_namespace, "-")}, summed over service = ${join(", ", var.metrics_service_names)}). `loom list --status FAILED` finds them; fix the step, then `loom redrive ID`."

  dynamic "metric_query" {
    for_each = var.metrics_service_names
    content {
      id          = "m${metric_query.key}"
      return_data = false
      metric {
        namespace   = var.metrics_namespace
        metric_name = "ExecutionsFailed"
        dimensions  = { service = metric_query.value }
        stat        = "Sum"
        period      = var.period_s
      }
    }
  }

  metric_query {
    id          = "failed"
    label       = "ExecutionsFailed (all services)"
    expression  = join(" + ", [for i, _ in var.metrics_service_names : "FILL(m${i}, 0)"])
    return_data = true
  }

  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = var.failed_executions_threshold
  evaluation_periods  = 1
  # No failure, no datapoint: Powertools publishes nothing for a metric that was not added.
  treat_missing_data = "notBreaching"

  alarm_actions = var.alarm_actions
  ok_actions    = var.ok_actions

  tags = var.tags
}

# ---------------------------------------------------------------------------------------------
# Throttling: DynamoDB (the table and each GSI, reads and writes) and Lambda (per function).
# A throttled step is retried, so throttling shows up as latency first and as DLQ messages last.
# ---------------------------------------------------------------------------------------------
locals {
  # "table" plus one entry per GSI; the GSI entries carry the GlobalSecondaryIndexName dimension.
  dynamodb_throttle_targets = var.create && var.table_name != null ? merge(
    { table = { index = null, dimensions = { TableName = var.table_name } } },
    { for gsi in var.gsi_names : "table-${gsi}" => { index = gsi, dimensions = { TableName = var.table_name, GlobalSecondaryIndexName = gsi } } },
  ) : {}
}

resource "aws_cloudwatch_metric_alarm" "dynamodb_throttles" {
  for_each = local.dynamodb_throttle_targets

  alarm_name        = "${var.name_prefix}-${each.key}-throttles"
  alarm_description = each.value.index == null ? "DynamoDB throttled reads or writes on table ${var.table_name} (ReadThrottleEvents + WriteThrottleEvents). Raise its capacity (or switch to PAY_PER_REQUEST); throttled steps are retried and slow down." : "DynamoDB throttled reads or writes on index ${each.value.index} of table ${var.table_name} (ReadThrottleEvents + WriteThrottleEvents). A throttled index also throttles the table's writes: raise the index's capacity."

  metric_query {
    id          = "reads"
    return_data = false
    metric {
      namespace   = "AWS/DynamoDB"
      metric_name = "ReadThrottleEvents"
      dimensions  = each.value.dimensions
      stat        = "Sum"
      period      = var.period_s
    }
  }

  metric_query {
    id          = "writes"
    return_data = false
    metric {
      namespace   = "AWS/DynamoDB"
      metric_name = "WriteThrottleEvents"
      dimensions  = each.value.dimensions
      stat        = "Sum"
      period      = var.period_s
    }
  }

  metric_query {
    id          = "throttles"
    label       = "ReadThrottleEvents + WriteThrottleEvents"
    expression  = "FILL(reads, 0) + FILL(writes, 0)"
    return_data = true
  }

  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = var.dynamodb_throttles_threshold
  evaluation_periods  = var.evaluation_periods
  # DynamoDB publishes throttle events only when there are some.
  treat_missing_data = "notBreaching"

  alarm_actions = var.alarm_actions
  ok_actions    = var.ok_actions

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "function_throttles" {
  for_each = var.create && var.function_throttles_threshold != null ? var.function_names : {}

  alarm_name        = "${var.name_prefix}-${each.key}-throttles"
  alarm_description = "Lambda throttled invocations of ${each.value} (reserved concurrency or the account's limit reached). Throttled SQS receives count towards the DLQ's maxReceiveCount."
  namespace         = "AWS/Lambda"
  metric_name       = "Throttles"
  dimensions        = { FunctionName = each.value }
  statistic         = "Sum"
  period            = var.period_s

  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = var.function_throttles_threshold
  evaluation_periods  = var.evaluation_periods
  treat_missing_data  = "notBreaching"

  alarm_actions = var.alarm_actions
  ok_actions    = var.ok_actions

  tags = var.tags
}

# ---------------------------------------------------------------------------------------------
# A scheduled function that stopped running (the sweeper: no sweeper, no wake-ups, no re-drives).
# Lambda publishes no Invocations datapoint for a period without invocations, so missing data
# must breach.
# ---------------------------------------------------------------------------------------------
resource "aws_cloudwatch_metric_alarm" "function_stopped" {
  for_each = var.create ? var.heartbeat_function_names : {}

  alarm_name        = "${var.name_prefix}-${each.key}-stopped"
  alarm_description = "${each.value} was not invoked in the last ${var.heartbeat_window_s} s: its schedule is disabled or deleted, or invocations are throttled. Sleeps, retries and stalled steps wait until it runs again."
  namespace         = "AWS/Lambda"
  metric_name       = "Invocations"
  dimensions        = { FunctionName = each.value }
  statistic         = "Sum"
  period            = var.heartbeat_window_s

  comparison_operator = "LessThanThreshold"
  threshold           = 1
  evaluation_periods  = 1
  treat_missing_data  = "breaching"

  alarm_actions = var.alarm_actions
  ok_actions    = var.ok_actions

  tags = var.tags
}

# ---------------------------------------------------------------------------------------------
# A step message that waits as long as its lease (LOOM_LEASE_S) gets re-driven by the sweeper as
# if its worker had died: the alarm fires first, at lease_age_fraction of the lease.
# ---------------------------------------------------------------------------------------------
locals {
  lease_age_threshold_s = var.lease_s == null ? null : floor(var.lease_s * var.lease_age_fraction)
}

resource "aws_cloudwatch_metric_alarm" "step_message_age_near_lease" {
  count = var.create && var.lease_s != null ? 1 : 0

  alarm_name        = "${var.name_prefix}-step-queue-age-near-lease"
  alarm_description = "A message in ${var.queue_name} is older than ${coalesce(local.lease_age_threshold_s, 0)} s, ${var.lease_age_fraction * 100}% of the ${coalesce(var.lease_s, 0)} s lease (LOOM_LEASE_S): once it reaches the lease the sweeper re-drives its execution as stalled. Workers are not keeping up or are throttled."
  namespace         = "AWS/SQS"
  metric_name       = "ApproximateAgeOfOldestMessage"
  dimensions        = { QueueName = var.queue_name }
  statistic         = "Maximum"
  # SQS publishes every 60 s at best; one breaching datapoint fires it, so it fires before the age
  # reaches the lease whenever the lease is at least a minute longer than the threshold.
  period = 60

  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = coalesce(local.lease_age_threshold_s, 0)
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"

  alarm_actions = var.alarm_actions
  ok_actions    = var.ok_actions

  tags = var.tags
}
