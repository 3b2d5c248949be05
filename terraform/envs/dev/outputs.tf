# The same file in every environment (tests/terraform/test_envs.py checks it): the names are what
# `loom --env-dir` and the local runtime read. envs/local adds `endpoint` in its main.tf.

output "region" {
  description = "Region of the resources."
  value       = var.region
}

output "table_name" {
  description = "Name of the DynamoDB table (LOOM_TABLE_NAME)."
  value       = module.loom.table_name
}

output "table_arn" {
  description = "ARN of the DynamoDB table."
  value       = module.loom.table_arn
}

output "queue_url" {
  description = "URL of the step queue (LOOM_QUEUE_URL)."
  value       = module.loom.queue_url
}

output "queue_arn" {
  description = "ARN of the step queue."
  value       = module.loom.queue_arn
}

output "dlq_url" {
  description = "URL of the dead-letter queue (LOOM_DLQ_URL)."
  value       = module.loom.dlq_url
}

output "dlq_arn" {
  description = "ARN of the dead-letter queue."
  value       = module.loom.dlq_arn
}

output "function_names" {
  description = "Function names keyed worker, sweeper, control_plane."
  value       = module.loom.function_names
}

output "function_arns" {
  description = "Function ARNs keyed worker, sweeper, control_plane."
  value       = module.loom.function_arns
}

output "function_url" {
  description = "The control plane's Function URL (AWS_IAM)."
  value       = module.loom.function_url
}

output "shard_count" {
  description = "Due-index shard count (LOOM_SHARDS)."
  value       = module.loom.shard_count
}

output "visibility_timeout_s" {
  description = "Derived visibility timeout of the step queue."
  value       = module.loom.visibility_timeout_s
}

output "lease_s" {
  description = "Step-message lease (LOOM_LEASE_S)."
  value       = module.loom.lease_s
}

output "status_event_bus_name" {
  description = "EventBridge bus of the status-change events (null when status_events is off)."
  value       = module.loom.status_event_bus_name
}

output "status_event_bus_arn" {
  description = "ARN of the status-change event bus (null when status_events is off)."
  value       = module.loom.status_event_bus_arn
}

output "operator_policy_json" {
  description = "IAM policy for operators: the loom CLI (dlq list/redrive included), the console, the MCP server."
  value       = module.loom.operator_policy_json
}

output "schedule_group_name" {
  description = "The EventBridge Scheduler group of the schedules (null without schedules)."
  value       = module.loom.schedule_group_name
}

output "schedule_arns" {
  description = "ARNs of the schedules, keyed by name."
  value       = module.loom.schedule_arns
}

output "scheduler_role_arn" {
  description = "The role Scheduler assumes to invoke the control plane (null without schedules)."
  value       = module.loom.scheduler_role_arn
}

output "schedule_dlq_url" {
  description = "The queue of firings Scheduler could not deliver (null without schedules)."
  value       = module.loom.schedule_dlq_url
}
