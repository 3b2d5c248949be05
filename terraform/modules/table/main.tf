# Loom's single table. The key schema is a contract with engine-core (storage/_items.py and
# storage/dynamodb.py), so attribute names are constants here, not inputs.
locals {
  hash_key      = "PK"
  range_key     = "SK"
  gsi_name      = "GSI1"
  gsi_hash_key  = "GSI1PK"
  gsi_range_key = "GSI1SK"
  list_index    = "GSI2"
  list_hash_key = "GSI2PK"
  list_sort_key = "GSI2SK"
  ttl_attribute = "expires_at"

  provisioned = var.billing_mode == "PROVISIONED"
}

resource "aws_dynamodb_table" "this" {
  count = var.create ? 1 : 0

  #checkov:skip=CKV_AWS_119:A customer-managed KMS key is optional (var.kms_key_arn); without it the table is encrypted with the AWS managed key aws/dynamodb, which costs nothing per month.
  #checkov:skip=CKV2_AWS_16:No auto scaling by design: the default 25 RCU/25 WCU split stays inside the always-free tier, and bursty production loads should switch billing_mode to PAY_PER_REQUEST instead.

  name         = var.name
  billing_mode = var.billing_mode
  hash_key     = local.hash_key
  range_key    = local.range_key

  # Capacity arguments must be absent (null) in on-demand mode.
  read_capacity  = local.provisioned ? var.read_capacity : null
  write_capacity = local.provisioned ? var.write_capacity : null

  attribute {
    name = local.hash_key
    type = "S"
  }

  attribute {
    name = local.range_key
    type = "S"
  }

  attribute {
    name = local.gsi_hash_key
    type = "S"
  }

  attribute {
    name = local.gsi_range_key
    type = "S"
  }

  attribute {
    name = local.list_hash_key
    type = "S"
  }

  attribute {
    name = local.list_sort_key
    type = "S"
  }

  # Sparse due-index: only executions waiting for a wake-up carry GSI1PK = DUE#<shard> and
  # GSI1SK = <next_wake_at> (ended ones owing housekeeping: FIN#<shard>, <finalize_by>). The sweeper
  # re-reads the base item before acting, so keys are enough.
  global_secondary_index {
    name            = local.gsi_name
    hash_key        = local.gsi_hash_key
    range_key       = local.gsi_range_key
    projection_type = "KEYS_ONLY"
    read_capacity   = local.provisioned ? var.gsi_read_capacity : null
    write_capacity  = local.provisioned ? var.gsi_write_capacity : null
  }

  # The list index (GET /executions, loom list): every execution item carries GSI2PK = EXECS and
  # GSI2SK = <created_at>#<id>, and projects only workflow and list_status (LIVE, or the terminal
  # status), which change when an execution starts or ends, never on a step: two index writes per
  # execution, none per step.
  global_secondary_index {
    name               = local.list_index
    hash_key           = local.list_hash_key
    range_key          = local.list_sort_key
    projection_type    = "INCLUDE"
    non_key_attributes = ["workflow", "list_status"]
    read_capacity      = local.provisioned ? var.list_index_read_capacity : null
    write_capacity     = local.provisioned ? var.list_index_write_capacity : null
  }

  # Terminal executions and their STEP# items carry expires_at (epoch seconds); DynamoDB deletes
  # them best-effort within days, and the engine hides expired items until then.
  ttl {
    attribute_name = local.ttl_attribute
    enabled        = true
  }

  point_in_time_recovery {
    enabled = var.point_in_time_recovery_enabled
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = var.kms_key_arn
  }

  deletion_protection_enabled = var.deletion_protection_enabled

  tags = var.tags
}
