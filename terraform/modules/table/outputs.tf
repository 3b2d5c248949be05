output "table_name" {
  description = "Name of the table (LOOM_TABLE_NAME)."
  value       = try(aws_dynamodb_table.this[0].name, null)
}

output "table_arn" {
  description = "ARN of the table, for IAM statements on items."
  value       = try(aws_dynamodb_table.this[0].arn, null)
}

output "gsi_name" {
  description = "Name of the sparse due-index (GSI1)."
  value       = var.create ? local.gsi_name : null
}

output "gsi_arn" {
  description = "ARN of GSI1 (<table_arn>/index/GSI1), for the sweeper's dynamodb:Query permission."
  value       = try("${aws_dynamodb_table.this[0].arn}/index/${local.gsi_name}", null)
}

output "ttl_attribute_name" {
  description = "Attribute DynamoDB TTL reads (epoch seconds) on terminal executions and their history."
  value       = var.create ? local.ttl_attribute : null
}

output "billing_mode" {
  description = "Billing mode of the table."
  value       = try(aws_dynamodb_table.this[0].billing_mode, null)
}

output "list_index_name" {
  description = "Name of the list index (GSI2) behind GET /executions and loom list."
  value       = var.create ? local.list_index : null
}
