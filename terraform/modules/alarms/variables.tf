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

variable "metrics_namespace" {
  description = "CloudWatch namespace of Loom's custom metrics (POWERTOOLS_METRICS_NAMESPACE). With metrics_service_names, enables the failed-executions alarm; null: no such alarm."
  type        = string
  default     = null
}

variable "metrics_service_names" {
  description = "Powertools service names (POWERTOOLS_SERVICE_NAME, the metrics' `service` dimension) whose ExecutionsFailed series the failed-executions alarm sums, e.g. [\"loom-worker\", \"loom-sweeper\"]. Empty: no such alarm."
  type        = list(string)
  default     = []
}

variable "failed_executions_threshold" {
  description = "The failed-executions alarm fires when this many executions end FAILED within one period."
  type        = number
  default     = 1

  validation {
    condition     = var.failed_executions_threshold >= 1
    error_message = "failed_executions_threshold must be at least 1."
  }
}

variable "table_name" {
  description = "DynamoDB table whose ReadThrottleEvents + WriteThrottleEvents get an alarm (and, with gsi_names, each index's). null: no DynamoDB throttle alarms."
  type        = string
  default     = null
}

variable "gsi_names" {
  description = "Global secondary indexes of table_name that get their own throttle alarm (metrics with the GlobalSecondaryIndexName dimension), e.g. [\"GSI1\"]."
  type        = list(string)
  default     = []
}

variable "dynamodb_throttles_threshold" {
  description = "A DynamoDB throttle alarm fires when the table's (or index's) read plus write throttle events in one period reach this value."
  type        = number
  default     = 1

  validation {
    condition     = var.dynamodb_throttles_threshold >= 1
    error_message = "dynamodb_throttles_threshold must be at least 1."
  }
}

variable "function_throttles_threshold" {
  description = "Each function of function_names gets a Throttles alarm that fires when its throttles in one period reach this value. null: no Lambda throttle alarms."
  type        = number
  default     = 1

  validation {
    condition     = var.function_throttles_threshold == null || try(var.function_throttles_threshold >= 1, false)
    error_message = "function_throttles_threshold must be null or at least 1."
  }
}

variable "heartbeat_function_names" {
  description = "Scheduled functions that must keep running, keyed by a short static label used in the alarm name (e.g. { sweeper = \"loom-sweeper\" }): each alarm fires when the function had no invocation for heartbeat_window_s; missing data breaches."
  type        = map(string)
  default     = {}
}

variable "heartbeat_window_s" {
  description = "Window in seconds without a single invocation after which a heartbeat alarm fires (the sweeper runs every 60 s)."
  type        = number
  default     = 300

  validation {
    condition     = var.heartbeat_window_s >= 120 && var.heartbeat_window_s % 60 == 0
    error_message = "heartbeat_window_s must be a multiple of 60 seconds, at least 120 (one late schedule must not fire it)."
  }
}

variable "lease_s" {
  description = "The step-message lease (LOOM_LEASE_S) in seconds. Enables the step queue's age-near-lease alarm, which fires when the oldest message is lease_s x lease_age_fraction old. null: no such alarm."
  type        = number
  default     = null

  validation {
    condition     = var.lease_s == null || try(var.lease_s > 0, false)
    error_message = "lease_s must be null or more than 0."
  }
}

variable "lease_age_fraction" {
  description = "Fraction of lease_s at which the age-near-lease alarm fires (0 < x < 1). The default 0.5 leaves half the lease to react before the sweeper re-drives waiting steps as stalled."
  type        = number
  default     = 0.5

  validation {
    condition     = var.lease_age_fraction > 0 && var.lease_age_fraction < 1
    error_message = "lease_age_fraction must be between 0 and 1 (exclusive): the alarm must fire before a message's age reaches the lease."
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
