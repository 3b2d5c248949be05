output "dlq_depth_alarm_name" {
  description = "Name of the DLQ depth alarm."
  value       = try(aws_cloudwatch_metric_alarm.dlq_depth[0].alarm_name, null)
}

output "oldest_message_age_alarm_name" {
  description = "Name of the step queue's oldest-message-age alarm."
  value       = try(aws_cloudwatch_metric_alarm.oldest_step_message_age[0].alarm_name, null)
}

output "function_errors_alarm_names" {
  description = "Names of the function error alarms, keyed like function_names."
  value       = var.create ? { for k, a in aws_cloudwatch_metric_alarm.function_errors : k => a.alarm_name } : null
}

output "executions_failed_alarm_name" {
  description = "Name of the failed-executions alarm (null without metrics_namespace and metrics_service_names)."
  value       = try(aws_cloudwatch_metric_alarm.executions_failed[0].alarm_name, null)
}

output "dynamodb_throttles_alarm_names" {
  description = "Names of the DynamoDB throttle alarms, keyed table and table-<gsi>."
  value       = var.create ? { for k, a in aws_cloudwatch_metric_alarm.dynamodb_throttles : k => a.alarm_name } : null
}

output "function_throttles_alarm_names" {
  description = "Names of the Lambda throttle alarms, keyed like function_names."
  value       = var.create ? { for k, a in aws_cloudwatch_metric_alarm.function_throttles : k => a.alarm_name } : null
}

output "function_stopped_alarm_names" {
  description = "Names of the heartbeat alarms, keyed like heartbeat_function_names."
  value       = var.create ? { for k, a in aws_cloudwatch_metric_alarm.function_stopped : k => a.alarm_name } : null
}

output "step_message_age_near_lease_alarm_name" {
  description = "Name of the step queue's age-near-lease alarm (null without lease_s)."
  value       = try(aws_cloudwatch_metric_alarm.step_message_age_near_lease[0].alarm_name, null)
}

output "lease_age_threshold_s" {
  description = "Threshold of the age-near-lease alarm in seconds: floor(lease_s x lease_age_fraction), or null."
  value       = var.create ? local.lease_age_threshold_s : null
}

output "alarm_arns" {
  description = "ARNs of every alarm of the module."
  value = var.create ? concat(
    aws_cloudwatch_metric_alarm.dlq_depth[*].arn,
    aws_cloudwatch_metric_alarm.oldest_step_message_age[*].arn,
    [for a in aws_cloudwatch_metric_alarm.function_errors : a.arn],
    aws_cloudwatch_metric_alarm.executions_failed[*].arn,
    [for a in aws_cloudwatch_metric_alarm.dynamodb_throttles : a.arn],
    [for a in aws_cloudwatch_metric_alarm.function_throttles : a.arn],
    [for a in aws_cloudwatch_metric_alarm.function_stopped : a.arn],
    aws_cloudwatch_metric_alarm.step_message_age_near_lease[*].arn,
  ) : null
}
