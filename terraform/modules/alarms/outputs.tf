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

output "alarm_arns" {
  description = "ARNs of every alarm of the module."
  value = var.create ? concat(
    aws_cloudwatch_metric_alarm.dlq_depth[*].arn,
    aws_cloudwatch_metric_alarm.oldest_step_message_age[*].arn,
    [for a in aws_cloudwatch_metric_alarm.function_errors : a.arn],
  ) : null
}
