# Schedules: workflows started on a cron, rate or one-time schedule. Each entry of var.schedules is an
# EventBridge Scheduler schedule in the group <name>, invoking the control plane directly (not through
# its Function URL) with a payload naming the schedule and carrying Scheduler's scheduled time. The
# control plane reads what each schedule starts (workflow, input, overlap) from LOOM_SCHEDULES, so the
# event can fire only what is deployed. Scheduler's role may invoke that one function and send failed
# deliveries to the schedules' DLQ; nothing is created when var.schedules is empty.
locals {
  schedules_enabled = var.create && length(var.schedules) > 0

  # What the schedules input's validations check cron fields against (engine_core.schedules.expressions
  # evaluates the same forms): one pattern per field, lists of values, ranges and increments.
  cron_names = {
    JAN = 1, FEB = 2, MAR = 3, APR = 4, MAY = 5, JUN = 6, JUL = 7, AUG = 8, SEP = 9, OCT = 10, NOV = 11, DEC = 12,
    SUN = 1, MON = 2, TUE = 3, WED = 4, THU = 5, FRI = 6, SAT = 7,
  }
  cron_values = {
    minutes = "[0-5]?[0-9]"
    hours   = "[01]?[0-9]|2[0-3]"
    days    = "0?[1-9]|[12][0-9]|3[01]"
    months  = "0?[1-9]|1[0-2]|JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC"
    weekday = "[1-7]|SUN|MON|TUE|WED|THU|FRI|SAT"
    years   = "19[7-9][0-9]|2[01][0-9][0-9]"
  }
  cron_lists = { for k, v in local.cron_values : k => format("(\\*|(%[1]s)(-(%[1]s))?)(/[1-9][0-9]*)?", v) }
  cron_field_patterns = [
    format("^%[1]s(,%[1]s)*$", local.cron_lists.minutes),
    format("^%[1]s(,%[1]s)*$", local.cron_lists.hours),
    format("(?i)^(\\?|L|LW|(%s)W|%[2]s(,%[2]s)*)$", local.cron_values.days, local.cron_lists.days),
    format("(?i)^%[1]s(,%[1]s)*$", local.cron_lists.months),
    format("(?i)^(\\?|L|(%s)L|(%[1]s)#[1-5]|%[2]s(,%[2]s)*)$", local.cron_values.weekday, local.cron_lists.weekday),
    format("^%[1]s(,%[1]s)*$", local.cron_lists.years),
  ]
  schedules_by_name = { for s in var.schedules : s.name => s }

  # LOOM_SCHEDULES: what engine_core.schedules.config reads (the input decoded, so it is JSON once).
  schedules_config = [for s in var.schedules : {
    name       = s.name
    workflow   = s.workflow
    expression = s.expression
    timezone   = s.timezone
    input      = jsondecode(s.input)
    overlap    = s.overlap
    enabled    = s.enabled
  }]
  schedules_environment = length(var.schedules) == 0 ? "" : jsonencode(local.schedules_config)

  schedule_dlq_name = "${var.name}-schedules-dlq"
  scheduler_role    = "${var.name}-scheduler-${local.region}"
}

data "aws_caller_identity" "schedules" {
  count = local.schedules_enabled ? 1 : 0
}

resource "aws_scheduler_schedule_group" "this" {
  count = local.schedules_enabled ? 1 : 0

  name = var.name

  tags = var.tags

  lifecycle {
    precondition {
      # Lambda allows 4 KB of environment variables per function, Loom's own LOOM_* settings included.
      condition     = length(local.schedules_environment) + length(jsonencode(var.workflow_access)) + local.extra_environment_size <= 3072
      error_message = "schedules (${length(local.schedules_environment)} characters as LOOM_SCHEDULES), workflow_access (${length(jsonencode(var.workflow_access))}) and extra_environment_variables (${local.extra_environment_size}) together exceed 3,072 characters: too much for the control plane's environment (Lambda allows 4 KB in all, Loom's own LOOM_* settings included). Keep schedule inputs small (a key the workflow looks up, not the data)."
    }
  }
}

# Deliveries Scheduler could not make (after its retry policy): the invoke was refused, throttled or the
# function was gone. A firing the control plane received but could not start is on the schedule's
# record and in the ScheduleFiringsFailed metric instead (the schedule_firings_failed alarm).
resource "aws_sqs_queue" "schedule_dlq" {
  count = local.schedules_enabled ? 1 : 0

  #checkov:skip=CKV2_AWS_73:A customer-managed KMS key is optional (var.kms_key_arn); without it the queue uses SSE-SQS (service-managed keys, no KMS charges).

  name                              = local.schedule_dlq_name
  message_retention_seconds         = var.dlq_message_retention_s
  sqs_managed_sse_enabled           = var.kms_key_arn == null ? true : null
  kms_master_key_id                 = var.kms_key_arn
  kms_data_key_reuse_period_seconds = var.kms_key_arn == null ? null : 300

  tags = var.tags
}

# Scheduler assumes this role for this account's schedule group only (confused-deputy protection).
resource "aws_iam_role" "scheduler" {
  count = local.schedules_enabled ? 1 : 0

  name                 = local.scheduler_role
  path                 = var.iam_role_path
  permissions_boundary = var.iam_permissions_boundary_arn
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "scheduler.amazonaws.com" }
      Action    = "sts:AssumeRole"
      Condition = {
        StringEquals = { "aws:SourceAccount" = data.aws_caller_identity.schedules[0].account_id }
        ArnEquals    = { "aws:SourceArn" = aws_scheduler_schedule_group.this[0].arn }
      }
    }]
  })

  tags = var.tags
}

# Least privilege: invoke the control plane (the templated Lambda target), and put dead-letter events on
# the schedules' DLQ (Scheduler sends them with the schedule's role).
resource "aws_iam_role_policy" "scheduler" {
  count = local.schedules_enabled ? 1 : 0

  name = "${var.name}-scheduler"
  role = aws_iam_role.scheduler[0].id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat([
      {
        Sid      = "InvokeControlPlane"
        Effect   = "Allow"
        Action   = ["lambda:InvokeFunction"]
        Resource = [module.control_plane.function_arn]
      },
      {
        Sid      = "SendFailedDeliveries"
        Effect   = "Allow"
        Action   = ["sqs:SendMessage"]
        Resource = [aws_sqs_queue.schedule_dlq[0].arn]
      },
    ], [for s in local.kms_statements : { Sid = s.sid, Effect = "Allow", Action = s.actions, Resource = s.resources }])
  })
}

resource "aws_scheduler_schedule" "this" {
  for_each = local.schedules_enabled ? local.schedules_by_name : {}

  #checkov:skip=CKV_AWS_297:The target input names a schedule and its time only (no data); Scheduler encrypts it with an AWS owned key.

  name                         = each.key
  group_name                   = aws_scheduler_schedule_group.this[0].name
  description                  = "Loom: starts workflow ${each.value.workflow} (overlap ${each.value.overlap})."
  schedule_expression          = each.value.expression
  schedule_expression_timezone = each.value.timezone
  state                        = each.value.enabled ? "ENABLED" : "DISABLED"

  flexible_time_window {
    mode = "OFF"
  }

  target {
    arn      = module.control_plane.function_arn
    role_arn = aws_iam_role.scheduler[0].arn
    # Scheduler fills in the <aws.scheduler.*> context attributes on each delivery. jsonencode writes
    # < and > as \u003c and \u003e, which Scheduler would not recognise: they are put back (schedule
    # names cannot contain them).
    input = replace(replace(jsonencode({
      source         = "loom.schedule"
      schedule       = each.key
      scheduled_time = "<aws.scheduler.scheduled-time>"
      schedule_arn   = "<aws.scheduler.schedule-arn>"
      attempt        = "<aws.scheduler.attempt-number>"
    }), "\\u003c", "<"), "\\u003e", ">")

    dead_letter_config {
      arn = aws_sqs_queue.schedule_dlq[0].arn
    }

    retry_policy {
      maximum_event_age_in_seconds = var.schedule_retry.maximum_event_age_s
      maximum_retry_attempts       = var.schedule_retry.maximum_retry_attempts
    }
  }

  depends_on = [aws_iam_role_policy.scheduler]
}

resource "aws_cloudwatch_metric_alarm" "schedule_dlq_depth" {
  count = local.schedules_enabled && var.create_alarms ? 1 : 0

  alarm_name          = "${var.name}-schedules-dlq-depth"
  alarm_description   = "Scheduler could not deliver a firing of a Loom schedule to ${local.function_name.control_plane} (messages in ${local.schedule_dlq_name}): the role, the function or throttling. Each message names the schedule and the error."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = local.schedule_dlq_name }
  statistic           = "Maximum"
  period              = 60
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "schedule_firings_failed" {
  count = local.schedules_enabled && var.create_alarms ? 1 : 0

  alarm_name          = "${var.name}-schedule-firings-failed"
  alarm_description   = "A schedule fired but its execution could not start (its workflow is not deployed, or its input does not fit): `loom schedules` shows each schedule's last firing and its error."
  namespace           = local.metrics_namespace
  metric_name         = "ScheduleFiringsFailed"
  dimensions          = { service = local.service_name.control_plane }
  statistic           = "Sum"
  period              = 60
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 1
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions

  tags = var.tags
}
