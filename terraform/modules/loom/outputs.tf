output "table_name" {
  description = "Name of the DynamoDB table."
  value       = module.table.table_name
}

output "table_arn" {
  description = "ARN of the DynamoDB table."
  value       = module.table.table_arn
}

output "queue_url" {
  description = "URL of the step queue."
  value       = module.queue.queue_url
}

output "queue_arn" {
  description = "ARN of the step queue."
  value       = module.queue.queue_arn
}

output "dlq_url" {
  description = "URL of the dead-letter queue."
  value       = module.queue.dlq_url
}

output "dlq_arn" {
  description = "ARN of the dead-letter queue."
  value       = module.queue.dlq_arn
}

output "function_names" {
  description = "Names of the functions, keyed worker, sweeper and control_plane."
  value = var.create ? {
    worker        = module.worker.function_name
    sweeper       = module.sweeper.function_name
    control_plane = module.control_plane.function_name
  } : null
}

output "function_arns" {
  description = "ARNs of the functions, keyed worker, sweeper and control_plane."
  value = var.create ? {
    worker        = module.worker.function_arn
    sweeper       = module.sweeper.function_arn
    control_plane = module.control_plane.function_arn
  } : null
}

output "role_arns" {
  description = "ARNs of the functions' execution roles, keyed like function_names."
  value = var.create ? {
    worker        = module.worker.role_arn
    sweeper       = module.sweeper.role_arn
    control_plane = module.control_plane.role_arn
  } : null
}

output "role_names" {
  description = "Names of the functions' execution roles (<name>-<function>-<region>), keyed like function_names: attach your own policies to the worker's with aws_iam_role_policy_attachment."
  value = var.create ? {
    worker        = module.worker.role_name
    sweeper       = module.sweeper.role_name
    control_plane = module.control_plane.role_name
  } : null
}

output "log_group_names" {
  description = "Names of the functions' log groups, keyed like function_names."
  value = var.create ? {
    worker        = module.worker.log_group_name
    sweeper       = module.sweeper.log_group_name
    control_plane = module.control_plane.log_group_name
  } : null
}

output "function_url" {
  description = "The control plane's Function URL (AWS_IAM: sign requests with SigV4, service lambda)."
  value       = module.control_plane.function_url
}

output "shard_count" {
  description = "Due-index shard count the functions read (LOOM_SHARDS)."
  value       = var.create ? var.shard_count : null
}

output "visibility_timeout_s" {
  description = "The step queue's derived visibility timeout in seconds."
  value       = module.queue.visibility_timeout_s
}

output "lease_s" {
  description = "The step-message lease the functions read (LOOM_LEASE_S), in seconds."
  value       = var.create ? local.lease_s : null
}

output "alarm_arns" {
  description = "ARNs of the CloudWatch alarms."
  value       = module.alarms.alarm_arns
}

output "status_event_bus_name" {
  description = "Name of the EventBridge bus that receives status-change events (created <name>-events, or the one given), or null when status_events is disabled."
  value       = local.status_bus_name
}

output "status_event_bus_arn" {
  description = "ARN of the status-change event bus, or null when status_events is disabled."
  value       = local.status_bus_arn
}

output "metrics_namespace" {
  description = "CloudWatch namespace of Loom's custom metrics (Loom/<name> unless metrics_namespace is set)."
  value       = var.create ? local.metrics_namespace : null
}

output "loom_version" {
  description = "Loom's version these modules belong to (terraform/modules/VERSION; released under the git tag loom-v<version>)."
  value       = var.create ? local.loom_version : null
}

output "operator_policy_json" {
  description = "The IAM policy an operator needs for the loom CLI (dlq list/redrive included), the console and the MCP server: attach it to your operators' role."
  value       = local.operator_policy_json
}

output "schedule_group_name" {
  description = "Name of the EventBridge Scheduler schedule group holding the schedules (<name>), or null without schedules."
  value       = try(aws_scheduler_schedule_group.this[0].name, null)
}

output "schedule_arns" {
  description = "ARNs of the schedules, keyed by schedule name ({} without schedules, null with create = false)."
  value       = var.create ? { for name, s in aws_scheduler_schedule.this : name => s.arn } : null
}

output "scheduler_role_arn" {
  description = "ARN of the role EventBridge Scheduler assumes to invoke the control plane, or null without schedules."
  value       = try(aws_iam_role.scheduler[0].arn, null)
}

output "schedule_dlq_url" {
  description = "URL of the queue that receives the firings Scheduler could not deliver, or null without schedules."
  value       = try(aws_sqs_queue.schedule_dlq[0].url, null)
}

output "schedule_dlq_arn" {
  description = "ARN of the schedules' dead-letter queue, or null without schedules."
  value       = try(aws_sqs_queue.schedule_dlq[0].arn, null)
}
