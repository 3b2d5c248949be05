variable "create" {
  description = "Whether to create the alarms."
  type        = bool
  default     = true
}

variable "name_prefix" {
  description = "Prefix of every alarm name."
  type        = string

  validation {
    condition     = length(var.name_prefix) >= 1 && length(var.name_prefix) <= 200
    error_message = "name_prefix must be 1-200 characters."
  }
}

variable "queue_name" {
  description = "Name of the step queue (for ApproximateAgeOfOldestMessage)."
  type        = string
}

variable "dlq_name" {
  description = "Name of the dead-letter queue (for its depth)."
  type        = string
}

variable "function_names" {
  description = "Functions whose Errors metric gets an alarm, keyed by a short static label used in the alarm name (e.g. { worker = \"loom-worker\" })."
  type        = map(string)
  default     = {}
}

variable "period_s" {
  description = "Period of every alarm's statistic in seconds (SQS metrics are published every 60 s at best)."
  type        = number
  default     = 60

  validation {
    condition     = var.period_s >= 60 && var.period_s % 60 == 0
    error_message = "period_s must be a multiple of 60 seconds."
  }
}

variable "evaluation_periods" {
  description = "Consecutive breaching periods before the age and error alarms fire (the DLQ alarm fires on the first)."
  type        = number
  default     = 1

  validation {
    condition     = var.evaluation_periods >= 1 && floor(var.evaluation_periods) == var.evaluation_periods
    error_message = "evaluation_periods must be a whole number of at least 1."
  }
}

variable "dlq_depth_threshold" {
  description = "The DLQ alarm fires when more than this many messages are visible in the DLQ."
  type        = number
  default     = 0

  validation {
    condition     = var.dlq_depth_threshold >= 0
    error_message = "dlq_depth_threshold must be 0 or more."
  }
}

variable "oldest_message_age_threshold_s" {
  description = "The age alarm fires when the oldest step message is older than this many seconds. Delayed (timer) messages count from when they were sent, so keep this above the longest SQS delay Loom uses (900 s)."
  type        = number
  default     = 1800

  validation {
    condition     = var.oldest_message_age_threshold_s >= 60
    error_message = "oldest_message_age_threshold_s must be at least 60 seconds."
  }
}

variable "function_errors_threshold" {
  description = "The error alarm of a function fires when its Errors sum in one period reaches this value."
  type        = number
  default     = 1

  validation {
    condition     = var.function_errors_threshold >= 1
    error_message = "function_errors_threshold must be at least 1."
  }
}

variable "alarm_actions" {
  description = "ARNs to notify when an alarm fires (e.g. an SNS topic). Empty: the alarms only change state."
  type        = list(string)
  default     = []
}

variable "ok_actions" {
  description = "ARNs to notify when an alarm returns to OK."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Tags for every alarm."
  type        = map(string)
  default     = {}
}
