variable "create" {
  description = "Whether to create the table. With false, nothing is created and every output is null."
  type        = bool
  default     = true
}

variable "name" {
  description = "Table name. Lambda functions receive it as LOOM_TABLE_NAME."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9_.-]{3,255}$", var.name))
    error_message = "The table name must be 3-255 characters of letters, digits, '_', '-' and '.'."
  }
}

variable "billing_mode" {
  description = "PROVISIONED (the default: fixed capacity, free up to 25 RCU/25 WCU per account and region) or PAY_PER_REQUEST (on-demand, for spiky production traffic)."
  type        = string
  default     = "PROVISIONED"

  validation {
    condition     = contains(["PROVISIONED", "PAY_PER_REQUEST"], var.billing_mode)
    error_message = "billing_mode must be PROVISIONED or PAY_PER_REQUEST."
  }
}

# The defaults split the always-free 25 RCU / 25 WCU between the table and its two indexes (the free
# tier counts every table and index of the account in the region together):
#   reads : table 18 (one consistent query per delivery, status reads) + GSI1 5 (one query per shard
#           per minute from the sweeper) + GSI2 2 (operators listing executions)
#   writes: table 13 + GSI1 10 (each message lease, sleep, retry, and a chain's key once per slack
#           period) + GSI2 2 (one write at an execution's start, one at its end)
variable "read_capacity" {
  description = "Table read capacity units in PROVISIONED mode (ignored on demand). Default 18, so that with gsi_read_capacity = 5 and list_index_read_capacity = 2 the total stays at the free 25 RCU."
  type        = number
  default     = 18

  validation {
    condition     = var.read_capacity >= 1 && floor(var.read_capacity) == var.read_capacity
    error_message = "read_capacity must be a whole number of at least 1."
  }
}

variable "write_capacity" {
  description = "Table write capacity units in PROVISIONED mode (ignored on demand). Default 13, so that with gsi_write_capacity = 10 and list_index_write_capacity = 2 the total stays at the free 25 WCU."
  type        = number
  default     = 13

  validation {
    condition     = var.write_capacity >= 1 && floor(var.write_capacity) == var.write_capacity
    error_message = "write_capacity must be a whole number of at least 1."
  }
}

variable "gsi_read_capacity" {
  description = "GSI1 read capacity units in PROVISIONED mode (ignored on demand). The sweeper is the only reader."
  type        = number
  default     = 5

  validation {
    condition     = var.gsi_read_capacity >= 1 && floor(var.gsi_read_capacity) == var.gsi_read_capacity
    error_message = "gsi_read_capacity must be a whole number of at least 1."
  }
}

variable "gsi_write_capacity" {
  description = "GSI1 write capacity units in PROVISIONED mode (ignored on demand). An under-provisioned GSI throttles writes to the table itself, so keep it near the table's write rate of due-time changes."
  type        = number
  default     = 10

  validation {
    condition     = var.gsi_write_capacity >= 1 && floor(var.gsi_write_capacity) == var.gsi_write_capacity
    error_message = "gsi_write_capacity must be a whole number of at least 1."
  }
}

variable "list_index_read_capacity" {
  description = "Provisioned read capacity of the list index (GSI2: GET /executions, loom list); ignored on PAY_PER_REQUEST."
  type        = number
  default     = 2

  validation {
    condition     = var.list_index_read_capacity >= 1
    error_message = "list_index_read_capacity must be at least 1."
  }
}

variable "list_index_write_capacity" {
  description = "Provisioned write capacity of the list index (GSI2: two writes per execution, at its start and its end); ignored on PAY_PER_REQUEST."
  type        = number
  default     = 2

  validation {
    condition     = var.list_index_write_capacity >= 1
    error_message = "list_index_write_capacity must be at least 1."
  }
}

variable "point_in_time_recovery_enabled" {
  description = "Whether point-in-time recovery (continuous backups, 35 days) is on."
  type        = bool
  default     = true
}

variable "kms_key_arn" {
  description = "ARN of a customer-managed KMS key for server-side encryption. null uses the AWS managed key aws/dynamodb."
  type        = string
  default     = null
}

variable "deletion_protection_enabled" {
  description = "Whether DynamoDB refuses to delete the table (terraform destroy then fails until it is turned off). Keep true in production."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Tags for the table."
  type        = map(string)
  default     = {}
}
