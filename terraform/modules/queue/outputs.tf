output "queue_url" {
  description = "URL of the step queue (LOOM_QUEUE_URL)."
  value       = try(aws_sqs_queue.this[0].url, null)
}

output "queue_arn" {
  description = "ARN of the step queue."
  value       = try(aws_sqs_queue.this[0].arn, null)
}

output "queue_name" {
  description = "Name of the step queue."
  value       = try(aws_sqs_queue.this[0].name, null)
}

output "dlq_url" {
  description = "URL of the dead-letter queue (LOOM_DLQ_URL)."
  value       = try(aws_sqs_queue.dlq[0].url, null)
}

output "dlq_arn" {
  description = "ARN of the dead-letter queue."
  value       = try(aws_sqs_queue.dlq[0].arn, null)
}

output "dlq_name" {
  description = "Name of the dead-letter queue."
  value       = try(aws_sqs_queue.dlq[0].name, null)
}

output "visibility_timeout_s" {
  description = "The derived visibility timeout of the step queue: 6 x consumer_timeout_s + consumer_batching_window_s."
  value       = var.create ? local.visibility_timeout_s : null
}

output "max_receive_count" {
  description = "Receives before a step message moves to the DLQ."
  value       = var.create ? var.max_receive_count : null
}
