variable "create" {
  description = "Whether to create the function and everything around it. With false, nothing is created and every output is null."
  type        = bool
  default     = true
}

variable "name" {
  description = "Function name; also names the role (unless role_name is set), the inline policy, the log group /aws/lambda/<name> and the schedule rule <name>-schedule."
  type        = string

  validation {
    # 64 for Lambda, minus "-schedule" for the EventBridge rule name.
    condition     = can(regex("^[a-zA-Z0-9_-]{1,55}$", var.name))
    error_message = "The function name must be 1-55 letters, digits, '_' or '-'."
  }
}

variable "description" {
  description = "Function description."
  type        = string
  default     = ""
}

variable "zip_path" {
  description = "Path to the deployment zip, built outside Terraform (`make build` for dev/prod, `make build-local` for the local stack). Required when create is true."
  type        = string
  default     = null

  validation {
    condition     = !var.create || try(fileexists(var.zip_path), false)
    error_message = "The Lambda zip does not exist: build it first (`make build` writes dist/lambda/*.zip for AWS, `make build-local` writes dist/local/*.zip for the local stack) or fix the path."
  }
}

variable "handler" {
  description = "Handler, as module.function (e.g. loom_worker.handler.handler)."
  type        = string
}

variable "runtime" {
  description = "Lambda runtime identifier. The zips from `make build` target python3.12."
  type        = string
  default     = "python3.12"

  validation {
    condition     = can(regex("^python3\\.[0-9]+$", var.runtime))
    error_message = "runtime must be a Python runtime such as python3.12: Loom's zips hold Python packages."
  }
}

variable "memory_mb" {
  description = "Memory in MB (128-10240); CPU scales with it."
  type        = number
  default     = 256

  validation {
    condition     = var.memory_mb >= 128 && var.memory_mb <= 10240 && floor(var.memory_mb) == var.memory_mb
    error_message = "memory_mb must be a whole number between 128 and 10240."
  }
}

variable "timeout_s" {
  description = "Timeout in seconds (1-900)."
  type        = number
  default     = 30

  validation {
    condition     = var.timeout_s >= 1 && var.timeout_s <= 900 && floor(var.timeout_s) == var.timeout_s
    error_message = "timeout_s must be a whole number between 1 and 900 seconds."
  }
}

variable "reserved_concurrency" {
  description = "Reserved concurrent executions: a cap and a guarantee. -1 means unreserved (needed on accounts whose concurrency quota is the new-account default of 10, where Lambda refuses any reservation)."
  type        = number
  default     = -1

  validation {
    condition     = var.reserved_concurrency >= -1 && floor(var.reserved_concurrency) == var.reserved_concurrency
    error_message = "reserved_concurrency must be -1 (unreserved), 0 (disabled) or a positive whole number."
  }

  validation {
    condition     = var.sqs_trigger == null || var.reserved_concurrency == -1 || var.reserved_concurrency >= try(var.sqs_trigger.maximum_concurrency, 0)
    error_message = "reserved_concurrency must be at least sqs_trigger.maximum_concurrency (or -1): otherwise Lambda pulls messages it can only throttle, and throttled receives count towards the DLQ."
  }
}

variable "environment_variables" {
  description = "Environment variables of the function."
  type        = map(string)
  default     = {}
}

variable "kms_key_arn" {
  description = "Customer-managed KMS key ARN for encrypting environment variables at rest. null uses the Lambda service key."
  type        = string
  default     = null
}

variable "policy_statements" {
  description = "Allow statements of the role's inline policy, besides writing to its own log group. No action or resource may contain \"*\"."
  type = list(object({
    sid       = string
    actions   = list(string)
    resources = list(string)
  }))
  default = []

  validation {
    condition     = alltrue([for s in var.policy_statements : alltrue([for a in s.actions : !strcontains(a, "*")])])
    error_message = "An IAM action contains \"*\": list the exact actions the function calls (least privilege)."
  }

  validation {
    # Resources are often unknown until apply (ARNs of resources created in the same run); the
    # check then runs at apply time.
    condition     = alltrue([for s in var.policy_statements : alltrue([for r in s.resources : !strcontains(r, "*")])])
    error_message = "An IAM resource contains \"*\": name the exact table, index, queue or key ARNs."
  }

  validation {
    condition     = alltrue([for s in var.policy_statements : length(s.actions) > 0 && length(s.resources) > 0 && can(regex("^[A-Za-z0-9]+$", s.sid))])
    error_message = "Each statement needs an alphanumeric sid, at least one action and at least one resource."
  }
}

variable "extra_policy_statements" {
  description = "Allow statements for what the function's own code calls beyond Loom (e.g. a workflow step's S3 reads), in a second inline policy <name>-workflow-steps. No action may contain \"*\" and no resource may be \"*\"; grant actions that only work on Resource \"*\" by attaching a policy to the role (output role_name) outside the module."
  type = list(object({
    sid       = string
    actions   = list(string)
    resources = list(string)
  }))
  default  = []
  nullable = false

  validation {
    condition     = alltrue([for s in var.extra_policy_statements : alltrue([for a in s.actions : !strcontains(a, "*")])])
    error_message = "An extra policy statement has an IAM action with \"*\": list the exact actions your workflow steps call (least privilege)."
  }

  validation {
    condition     = alltrue([for s in var.extra_policy_statements : alltrue([for r in s.resources : r != "*"])])
    error_message = "An extra policy statement has Resource \"*\": name the ARNs (a pattern such as arn:aws:s3:::bucket/* is fine). For an action that only works on \"*\", attach a policy to the role (output role_name) outside the module."
  }

  validation {
    condition     = alltrue([for s in var.extra_policy_statements : length(s.actions) > 0 && length(s.resources) > 0 && can(regex("^[A-Za-z0-9]+$", s.sid))]) && length(distinct([for s in var.extra_policy_statements : s.sid])) == length(var.extra_policy_statements)
    error_message = "Each extra policy statement needs a unique alphanumeric sid, at least one action and at least one resource."
  }
}

variable "role_name" {
  description = "Name of the execution role. null uses the function name."
  type        = string
  default     = null
}

variable "role_path" {
  description = "Path of the execution role (e.g. /loom/), if the account's guardrails require one."
  type        = string
  default     = "/"

  validation {
    condition     = can(regex("^/([A-Za-z0-9+=,.@_-]+/)*$", var.role_path)) && length(var.role_path) <= 512
    error_message = "role_path must begin and end with / (e.g. / or /loom/), with letters, digits and +=,.@_- between."
  }
}

variable "role_permissions_boundary" {
  description = "ARN of a permissions boundary policy for the role, if the account requires one."
  type        = string
  default     = null
}

variable "architecture" {
  description = "Instruction set of the function: x86_64 or arm64. Must match the zip's wheels (`make build` builds x86_64 zips; `make build LAMBDA_ARCH=arm64` arm64 ones, in dist/lambda-arm64)."
  type        = string
  default     = "x86_64"

  validation {
    condition     = contains(["x86_64", "arm64"], var.architecture)
    error_message = "architecture must be x86_64 or arm64 (and the zip built for it: `make build LAMBDA_ARCH=arm64`)."
  }
}

variable "tracing_mode" {
  description = "X-Ray tracing: PassThrough (default: no segments of its own; the trace header still propagates) or Active (the function records segments; the AWS managed AWSXRayDaemonWriteAccess policy is attached to its role)."
  type        = string
  default     = "PassThrough"

  validation {
    condition     = contains(["PassThrough", "Active"], var.tracing_mode)
    error_message = "tracing_mode must be PassThrough or Active."
  }
}

variable "vpc_config" {
  description = "Subnets and security groups to run the function in, or null for none. In a VPC the function reaches AWS APIs only through NAT or VPC endpoints of those subnets, and the AWS managed AWSLambdaVPCAccessExecutionRole policy (its network interfaces) is attached to its role."
  type = object({
    subnet_ids         = list(string)
    security_group_ids = list(string)
  })
  default = null

  validation {
    condition     = var.vpc_config == null || try(length(var.vpc_config.subnet_ids) > 0 && length(var.vpc_config.security_group_ids) > 0, false)
    error_message = "vpc_config needs at least one subnet id and one security group id (or null for no VPC)."
  }
}

variable "log_retention_days" {
  description = "Retention of the function's log group, in days (one of CloudWatch Logs' allowed values)."
  type        = number
  default     = 30

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be one of 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288 or 3653 (0, never expire, is not allowed)."
  }
}

variable "log_kms_key_id" {
  description = "Customer-managed KMS key ARN for the log group. The key policy must allow the CloudWatch Logs service principal. null uses service-owned keys."
  type        = string
  default     = null
}

variable "recursive_loop" {
  description = "Lambda recursive-loop detection: \"Allow\" lets SQS->Lambda->SQS chains run past 16 hops, \"Terminate\" is AWS's default. null leaves the setting unmanaged (for emulators without PutFunctionRecursionConfig)."
  type        = string
  default     = null

  validation {
    condition     = var.recursive_loop == null || contains(["Allow", "Terminate"], coalesce(var.recursive_loop, "Terminate"))
    error_message = "recursive_loop must be \"Allow\", \"Terminate\" or null."
  }
}

variable "sqs_trigger" {
  description = <<-EOT
    SQS event source mapping, or null for none. Partial batch responses (ReportBatchItemFailures) are always on.
      queue_arn           ARN of the queue to consume.
      enabled             false creates the mapping disabled (the local emulator would otherwise invoke through Docker).
      batch_size          1-10000 records per invocation (above 10 needs batching_window_s >= 1).
      batching_window_s   0-300 s to wait while gathering a batch.
      maximum_concurrency 2-1000 concurrent invocations the mapping may run.
  EOT
  type = object({
    queue_arn           = string
    enabled             = optional(bool, true)
    batch_size          = optional(number, 10)
    batching_window_s   = optional(number, 0)
    maximum_concurrency = optional(number, 5)
  })
  default = null

  validation {
    condition     = var.sqs_trigger == null || try(var.sqs_trigger.batch_size >= 1 && var.sqs_trigger.batch_size <= 10000, false)
    error_message = "sqs_trigger.batch_size must be between 1 and 10000."
  }

  validation {
    condition     = var.sqs_trigger == null || try(var.sqs_trigger.batching_window_s >= 0 && var.sqs_trigger.batching_window_s <= 300, false)
    error_message = "sqs_trigger.batching_window_s must be between 0 and 300 seconds."
  }

  validation {
    condition     = var.sqs_trigger == null || try(var.sqs_trigger.batch_size <= 10 || var.sqs_trigger.batching_window_s >= 1, false)
    error_message = "A batch_size above 10 needs batching_window_s of at least 1 second (SQS event source rule)."
  }

  validation {
    condition     = var.sqs_trigger == null || try(var.sqs_trigger.maximum_concurrency >= 2 && var.sqs_trigger.maximum_concurrency <= 1000, false)
    error_message = "sqs_trigger.maximum_concurrency must be between 2 and 1000 (the SQS event source's range)."
  }
}

variable "schedule" {
  description = "EventBridge schedule invoking the function, or null for none. expression is rate(...) or cron(...); enabled = false creates the rule disabled."
  type = object({
    expression = string
    enabled    = optional(bool, true)
  })
  default = null

  validation {
    condition     = var.schedule == null || can(regex("^(rate|cron)\\(.+\\)$", try(var.schedule.expression, "")))
    error_message = "schedule.expression must be an EventBridge rate(...) or cron(...) expression, e.g. rate(1 minute)."
  }
}

variable "create_function_url" {
  description = "Whether to create a Function URL. Its authorization type is always AWS_IAM (SigV4-signed callers only)."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for every resource of the module."
  type        = map(string)
  default     = {}
}
