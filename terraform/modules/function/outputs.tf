output "function_name" {
  description = "Name of the function."
  value       = try(aws_lambda_function.this[0].function_name, null)
}

output "function_arn" {
  description = "ARN of the function."
  value       = try(aws_lambda_function.this[0].arn, null)
}

output "role_name" {
  description = "Name of the function's execution role."
  value       = try(aws_iam_role.this[0].name, null)
}

output "role_arn" {
  description = "ARN of the function's execution role."
  value       = try(aws_iam_role.this[0].arn, null)
}

output "log_group_name" {
  description = "Name of the function's log group."
  value       = try(aws_cloudwatch_log_group.this[0].name, null)
}

output "function_url" {
  description = "The Function URL (AWS_IAM auth), or null when create_function_url is false."
  value       = try(aws_lambda_function_url.this[0].function_url, null)
}

output "event_source_mapping_uuid" {
  description = "UUID of the SQS event source mapping, or null without sqs_trigger."
  value       = try(aws_lambda_event_source_mapping.sqs[0].uuid, null)
}

output "schedule_rule_arn" {
  description = "ARN of the EventBridge schedule rule, or null without schedule."
  value       = try(aws_cloudwatch_event_rule.schedule[0].arn, null)
}

output "recursive_loop" {
  description = "The managed recursive-loop setting (\"Allow\"/\"Terminate\"), or null when unmanaged."
  value       = try(aws_lambda_function_recursion_config.this[0].recursive_loop, null)
}
