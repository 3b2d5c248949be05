variable "create" {
  description = "Whether to create the queues. With false, nothing is created and every output is null."
  type        = bool
  default     = true
}

variable "name" {
  description = "Name of the step queue. Lambda functions receive its URL as LOOM_QUEUE_URL."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9_-]{1,80}$", var.name))
    error_message = "An SQS queue name is 1-80 letters, digits, '_' or '-' (standard queues only; no .fifo)."
  }
}

variable "dlq_name" {
  description = "Name of the dead-letter queue. null means \"<name>-dlq\"."
  type        = string
  default     = null

  validation {
    condition     = var.dlq_name == null || can(regex("^[a-zA-Z0-9_-]{1,80}$", var.dlq_name))
    error_message = "An SQS queue name is 1-80 letters, digits, '_' or '-'."
  }
}

variable "consumer_timeout_s" {
  description = "Timeout in seconds of the function consuming the queue (the worker). The visibility timeout is derived from it as 6 x consumer_timeout_s + consumer_batching_window_s."
  type        = number

  validation {
    condition     = var.consumer_timeout_s >= 1 && var.consumer_timeout_s <= 900 && floor(var.consumer_timeout_s) == var.consumer_timeout_s
    error_message = "consumer_timeout_s must be a whole number of seconds between 1 and 900 (Lambda's maximum timeout)."
  }
}

variable "consumer_batching_window_s" {
  description = "Maximum batching window in seconds of the consumer's event source mapping; added to the derived visibility timeout."
  type        = number
  default     = 0

  validation {
    condition     = var.consumer_batching_window_s >= 0 && var.consumer_batching_window_s <= 300 && floor(var.consumer_batching_window_s) == var.consumer_batching_window_s
    error_message = "consumer_batching_window_s must be a whole number of seconds between 0 and 300."
  }
}

variable "message_retention_s" {
  description = "How long the step queue keeps a message, in seconds (60 s to 14 days, default 4 days). Must be shorter than the DLQ's retention."
  type        = number
  default     = 345600

  validation {
    condition     = var.message_retention_s >= 60 && var.message_retention_s <= 1209600
    error_message = "message_retention_s must be between 60 and 1209600 seconds (14 days)."
  }
}

variable "dlq_message_retention_s" {
  description = "How long the DLQ keeps a message, in seconds. Must be longer than message_retention_s: SQS keeps a message's original enqueue time when it moves to a standard DLQ, so an equal retention could expire it on arrival."
  type        = number
  default     = 1209600

  validation {
    condition     = var.dlq_message_retention_s >= 60 && var.dlq_message_retention_s <= 1209600
    error_message = "dlq_message_retention_s must be between 60 and 1209600 seconds (14 days)."
  }

  validation {
    condition     = var.dlq_message_retention_s > var.message_retention_s
    error_message = "dlq_message_retention_s must be longer than message_retention_s; lower message_retention_s (the DLQ maximum is 14 days)."
  }
}

variable "max_receive_count" {
  description = "Receives before SQS moves a message to the DLQ. Lambda throttling also counts receives, so at least 5 (AWS's recommendation)."
  type        = number
  default     = 5

  validation {
    condition     = var.max_receive_count >= 5 && var.max_receive_count <= 1000 && floor(var.max_receive_count) == var.max_receive_count
    error_message = "max_receive_count must be a whole number between 5 and 1000: fewer receives dead-letter valid messages when Lambda throttles."
  }
}

variable "receive_wait_time_s" {
  description = "Long-polling wait for ReceiveMessage calls that do not set their own (0-20 s). Lambda's pollers set their own."
  type        = number
  default     = 0

  validation {
    condition     = var.receive_wait_time_s >= 0 && var.receive_wait_time_s <= 20
    error_message = "receive_wait_time_s must be between 0 and 20 seconds."
  }
}

variable "kms_master_key_id" {
  description = "ID or ARN of a customer-managed KMS key for both queues. null uses SSE-SQS (SQS-owned keys)."
  type        = string
  default     = null
}

variable "kms_data_key_reuse_period_s" {
  description = "How long SQS reuses a data key before calling KMS again, with a customer-managed key (60-86400 s)."
  type        = number
  default     = 300

  validation {
    condition     = var.kms_data_key_reuse_period_s >= 60 && var.kms_data_key_reuse_period_s <= 86400
    error_message = "kms_data_key_reuse_period_s must be between 60 and 86400 seconds."
  }
}

variable "tags" {
  description = "Tags for both queues."
  type        = map(string)
  default     = {}
}
