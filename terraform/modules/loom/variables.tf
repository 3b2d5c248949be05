# ---------------------------------------------------------------------------------------------
# Naming, artifacts, toggles
# ---------------------------------------------------------------------------------------------
variable "create" {
  description = "Whether to create anything. With false, no resource is created and every output is null."
  type        = bool
  default     = true
}

variable "name" {
  description = "Prefix of every resource name: table <name>, queues <name>-steps and <name>-steps-dlq, functions <name>-worker, <name>-sweeper and <name>-control-plane, roles and log groups after the functions."
  type        = string
  default     = "loom"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,30}[a-z0-9]$", var.name))
    error_message = "name must be 2-32 lowercase letters, digits or '-', starting with a letter (function names get '-control-plane' appended)."
  }
}

variable "table_name" {
  description = "Name of the DynamoDB table; null uses name."
  type        = string
  default     = null
}

variable "lambda_zips" {
  description = "Paths of the three deployment zips: `make build` writes dist/lambda/{worker,sweeper,control-plane}.zip (python3.12, for AWS), `make build-local` writes dist/local/*.zip (this machine's Python, for the local stack)."
  type = object({
    worker        = string
    sweeper       = string
    control_plane = string
  })
}

variable "runtime" {
  description = "Lambda runtime of the three functions; must match the Python the zips were built for (python3.12 for `make build`)."
  type        = string
  default     = "python3.12"
}

variable "worker_event_source_enabled" {
  description = "Whether the worker's SQS event source mapping is enabled. The local env turns it off: moto would invoke through Docker on every SendMessage and lose the message without Docker."
  type        = bool
  default     = true
}

variable "manage_recursion_config" {
  description = "Whether to set the worker's recursive-loop detection to Allow (aws_lambda_function_recursion_config). Keep true on AWS: with AWS's default, Terminate, Lambda stops a workflow after about 16 chained steps. Only emulators that lack PutFunctionRecursionConfig (moto 5.2.1 answers 404) need false."
  type        = bool
  default     = true
}

variable "sweeper_schedule_enabled" {
  description = "Whether the sweeper's rate(1 minute) EventBridge rule is enabled."
  type        = bool
  default     = true
}

variable "create_alarms" {
  description = "Whether to create the CloudWatch alarms (DLQ depth, oldest step message age, function errors, and those alarm_settings turns on)."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}

variable "status_events" {
  description = "Status-change events on EventBridge. enabled = true: every execution that ends (COMPLETED, FAILED) or is CANCELLED puts one event (Source \"loom\", DetailType \"Loom Execution Status Change\") on a bus; the functions get LOOM_EVENT_BUS_NAME and events:PutEvents on it. event_bus_name: null creates a bus named <name>-events; a name or ARN uses that existing bus. Disabled (default): no bus, no permission, LOOM_EVENT_BUS_NAME empty."
  type = object({
    enabled        = optional(bool, false)
    event_bus_name = optional(string)
  })
  default  = {}
  nullable = false

  validation {
    condition = var.status_events.event_bus_name == null || can(regex(
      "^([A-Za-z0-9._/-]{1,256}|arn:aws[a-z-]*:events:[a-z0-9-]+:[0-9]{12}:event-bus/[A-Za-z0-9._/-]{1,256})$",
      coalesce(var.status_events.event_bus_name, "-")
    ))
    error_message = "status_events.event_bus_name must be null (create <name>-events), an event bus name (letters, digits, . _ / -) or an event bus ARN (arn:aws:events:<region>:<account>:event-bus/<name>)."
  }
}

# ---------------------------------------------------------------------------------------------
# Engine settings (LOOM_* environment variables; read by engine_core.settings.EngineSettings)
# ---------------------------------------------------------------------------------------------
variable "shard_count" {
  description = "Number of due-index shards: executions are spread over GSI1PK = DUE#0..DUE#<shard_count-1> and the sweeper queries each shard every minute (LOOM_SHARDS). Fixed for the table's life: changing it strands due items in shards the sweeper no longer reads."
  type        = number
  default     = 4

  validation {
    condition     = var.shard_count >= 1 && var.shard_count <= 256 && floor(var.shard_count) == var.shard_count
    error_message = "shard_count must be a whole number between 1 and 256 (engine-core's range)."
  }
}

variable "lease_s" {
  description = "Seconds an in-flight step message is trusted before the sweeper re-drives its execution (LOOM_LEASE_S). null (recommended) uses the step queue's derived visibility timeout."
  type        = number
  default     = null

  validation {
    condition     = var.lease_s == null || try(var.lease_s > 0 && var.lease_s <= 43200, false)
    error_message = "lease_s must be null or between 1 and 43200 seconds."
  }
}

variable "retention_days" {
  description = "Days a finished execution and its history are kept before DynamoDB TTL may delete them (LOOM_RETENTION_DAYS)."
  type        = number
  default     = 30

  validation {
    condition     = var.retention_days > 0
    error_message = "retention_days must be more than 0."
  }
}

variable "max_steps" {
  description = "Safety cap on steps per execution (LOOM_MAX_STEPS); Loom's replacement for Lambda's recursive-loop stop. At most 100000."
  type        = number
  default     = 1000

  validation {
    condition     = var.max_steps >= 1 && var.max_steps <= 100000 && floor(var.max_steps) == var.max_steps
    error_message = "max_steps must be a whole number between 1 and 100000."
  }
}

variable "max_total_attempts" {
  description = "Safety cap on step attempts over an execution's life (LOOM_MAX_TOTAL_ATTEMPTS). Default (null): five per step of max_steps, at least 5000."
  type        = number
  default     = null

  validation {
    condition     = var.max_total_attempts == null || try(var.max_total_attempts >= 1 && floor(var.max_total_attempts) == var.max_total_attempts, false)
    error_message = "max_total_attempts must be a whole number of at least 1 (or null: five per step of max_steps, at least 5000)."
  }
}

variable "max_chain_steps" {
  description = "Most steps one worker delivery runs back to back before handing the execution on through the queue (LOOM_MAX_CHAIN_STEPS). 1 runs one step per delivery."
  type        = number
  default     = 100

  validation {
    condition     = var.max_chain_steps >= 1 && var.max_chain_steps <= 10000 && floor(var.max_chain_steps) == var.max_chain_steps
    error_message = "max_chain_steps must be a whole number from 1 to 10000."
  }
}

variable "sweep_max_items" {
  description = "Most executions one sweeper run claims across all shards (LOOM_SWEEP_MAX_ITEMS)."
  type        = number
  default     = 500

  validation {
    condition     = var.sweep_max_items >= 1 && floor(var.sweep_max_items) == var.sweep_max_items
    error_message = "sweep_max_items must be a whole number of at least 1."
  }
}

variable "log_level" {
  description = "LOG_LEVEL of the functions (Powertools logger)."
  type        = string
  default     = "INFO"

  validation {
    condition     = contains(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], var.log_level)
    error_message = "log_level must be DEBUG, INFO, WARNING, ERROR or CRITICAL."
  }
}

variable "metrics_namespace" {
  description = "CloudWatch namespace of Loom's custom metrics (POWERTOOLS_METRICS_NAMESPACE). null (default) uses Loom/<name>, so two stacks in one account and region keep their metrics and failed-execution alarms apart."
  type        = string
  default     = null

  validation {
    condition     = var.metrics_namespace == null || can(regex("^[A-Za-z0-9._/#:-]{1,255}$", coalesce(var.metrics_namespace, "-"))) && !startswith(coalesce(var.metrics_namespace, "-"), "AWS/")
    error_message = "metrics_namespace must be null (Loom/<name>) or 1-255 letters, digits and . _ / # : -, not starting with AWS/."
  }
}

variable "extra_environment_variables" {
  description = "More environment variables for all three functions (e.g. for your workflow code). The LOOM_*, POWERTOOLS_* and LOG_LEVEL variables set by the module win over these. Lambda allows 4 KB of keys and values per function, of which Loom's own take about 1 KB (the control plane's also holds schedules and workflow_access): at most 3,072 characters here."
  type        = map(string)
  default     = {}

  validation {
    condition     = sum(concat([0], [for k, v in var.extra_environment_variables : length(k) + length(v)])) <= 3072
    error_message = "extra_environment_variables: their keys and values come to more than 3,072 characters; Lambda allows 4 KB per function, Loom's own settings included. Keep large values elsewhere (SSM Parameter Store, S3) and pass their names."
  }
}

# ---------------------------------------------------------------------------------------------
# Account guardrails: IAM, network, architecture, tracing
# ---------------------------------------------------------------------------------------------
variable "iam_permissions_boundary_arn" {
  description = "ARN of a permissions boundary policy set on the three execution roles, if the account requires one. null: none."
  type        = string
  default     = null

  validation {
    condition     = var.iam_permissions_boundary_arn == null || can(regex("^arn:aws[a-z-]*:iam::([0-9]{12}|aws):policy/.+$", coalesce(var.iam_permissions_boundary_arn, "-")))
    error_message = "iam_permissions_boundary_arn must be an IAM policy ARN (arn:aws:iam::<account>:policy/<name>) or null."
  }
}

variable "iam_role_path" {
  description = "Path of the three execution roles (e.g. /loom/), if the account's guardrails require one. The roles are named <name>-<function>-<region> (IAM names are global: the region keeps one stack name in two regions apart)."
  type        = string
  default     = "/"
}

variable "worker_vpc_config" {
  description = "Subnets and security groups for the worker, whose workflow steps may need private resources (a database, an internal API), or null (default) for none. The worker then reaches DynamoDB and SQS only through NAT or VPC endpoints (gateway endpoint for DynamoDB, interface endpoint for SQS) of those subnets; its role gets the AWS managed AWSLambdaVPCAccessExecutionRole policy. The sweeper and control plane stay outside."
  type = object({
    subnet_ids         = list(string)
    security_group_ids = list(string)
  })
  default = null
}

variable "worker_policy_statements" {
  description = "IAM Allow statements for what your workflow steps call (S3, a secret, another queue...), added to the worker's role as the inline policy <name>-worker-workflow-steps. Each: { sid, actions, resources }; no \"*\" action, no \"*\" resource (ARN patterns such as arn:aws:s3:::bucket/* are fine)."
  type = list(object({
    sid       = string
    actions   = list(string)
    resources = list(string)
  }))
  default  = []
  nullable = false

  # The function module checks the same; here they fail at `terraform validate` already.
  validation {
    condition     = alltrue([for s in var.worker_policy_statements : alltrue([for a in s.actions : !strcontains(a, "*")])])
    error_message = "An extra policy statement has an IAM action with \"*\": list the exact actions your workflow steps call (least privilege)."
  }

  validation {
    condition     = alltrue([for s in var.worker_policy_statements : alltrue([for r in s.resources : r != "*"])])
    error_message = "An extra policy statement has Resource \"*\": name the ARNs (a pattern such as arn:aws:s3:::bucket/* is fine). For an action that only works on \"*\", attach a policy to the role (output role_names.worker) outside the module."
  }

  validation {
    condition     = alltrue([for s in var.worker_policy_statements : length(s.actions) > 0 && length(s.resources) > 0 && can(regex("^[A-Za-z0-9]+$", s.sid))]) && length(distinct([for s in var.worker_policy_statements : s.sid])) == length(var.worker_policy_statements)
    error_message = "Each extra policy statement needs a unique alphanumeric sid, at least one action and at least one resource."
  }
}

variable "architecture" {
  description = "Instruction set of the three functions: x86_64 (default) or arm64 (Graviton). The zips must be built for it: `make build LAMBDA_ARCH=arm64` writes dist/lambda-arm64/*.zip."
  type        = string
  default     = "x86_64"

  validation {
    condition     = contains(["x86_64", "arm64"], var.architecture)
    error_message = "architecture must be x86_64 or arm64 (and the zips built for it: `make build LAMBDA_ARCH=arm64`)."
  }
}

variable "tracing_mode" {
  description = "X-Ray tracing of the three functions: PassThrough (default) or Active (each invocation records a trace; the roles get the AWS managed AWSXRayDaemonWriteAccess policy; X-Ray bills per trace)."
  type        = string
  default     = "PassThrough"

  validation {
    condition     = contains(["PassThrough", "Active"], var.tracing_mode)
    error_message = "tracing_mode must be PassThrough or Active."
  }
}

# ---------------------------------------------------------------------------------------------
# Who may start and operate which workflow (the control plane's allow-list)
# ---------------------------------------------------------------------------------------------
variable "workflow_access" {
  description = "Per-workflow allow-list of the callers (IAM principals) who may start a workflow (start), cancel, redrive and wake its executions (operate), and send them events and complete their callbacks (send; null: the operate list). Keyed by workflow name, or \"*\" for every workflow not listed; a workflow matched by neither is open to every caller the Function URL lets in. An entry matches the caller's ARN exactly, \"*\" in it matches any characters, an IAM role ARN also matches that role's sessions, and \"*\" alone matches everyone. {} (default): no allow-list. Refused callers get HTTP 403 access_denied; reads are not restricted. Sets LOOM_WORKFLOW_ACCESS on the control plane."
  type = map(object({
    start   = list(string)
    operate = list(string)
    send    = optional(list(string))
  }))
  default  = {}
  nullable = false

  validation {
    condition = alltrue([for workflow, lists in var.workflow_access : can(regex("^\\S+$", workflow)) && alltrue([
      for entry in concat(lists.start, lists.operate, lists.send == null ? [] : lists.send) : can(regex("^\\S{1,512}$", entry))
    ])])
    error_message = "workflow_access: every workflow name and principal must be non-empty with no whitespace (principals at most 512 characters), e.g. \"arn:aws:iam::123456789012:role/oncall\"."
  }

  validation {
    # Lambda allows 4 KB of environment variables in all, Loom's own LOOM_* settings included.
    condition     = length(jsonencode(var.workflow_access)) <= 2048
    error_message = "workflow_access is over 2,048 characters as JSON, too much for a Lambda environment variable beside Loom's own (4 KB in all): list roles rather than their sessions, or use \"*\" patterns."
  }
}

# ---------------------------------------------------------------------------------------------
# Table
# ---------------------------------------------------------------------------------------------
variable "table_billing_mode" {
  description = "PROVISIONED (default; with the default capacities the table and GSI1 use exactly the always-free 25 RCU / 25 WCU) or PAY_PER_REQUEST (on-demand)."
  type        = string
  default     = "PROVISIONED"
}

variable "table_read_capacity" {
  description = "Table RCU in PROVISIONED mode. Default 18 (+5 for GSI1 +2 for the list index GSI2 = 25, the free tier)."
  type        = number
  default     = 18
}

variable "table_write_capacity" {
  description = "Table WCU in PROVISIONED mode. Default 13 (+10 for GSI1 +2 for the list index GSI2 = 25, the free tier)."
  type        = number
  default     = 13
}

variable "gsi_read_capacity" {
  description = "GSI1 RCU in PROVISIONED mode. Default 5."
  type        = number
  default     = 5
}

variable "gsi_write_capacity" {
  description = "GSI1 WCU in PROVISIONED mode. Default 10."
  type        = number
  default     = 10
}

variable "point_in_time_recovery_enabled" {
  description = "Whether the table has point-in-time recovery."
  type        = bool
  default     = true
}

variable "deletion_protection_enabled" {
  description = "Whether the table is protected from deletion (terraform destroy fails while it is on). Keep true in production."
  type        = bool
  default     = true
}

# ---------------------------------------------------------------------------------------------
# Queue
# ---------------------------------------------------------------------------------------------
variable "queue_message_retention_s" {
  description = "Step queue retention in seconds (default 4 days). Must be shorter than dlq_message_retention_s."
  type        = number
  default     = 345600
}

variable "dlq_message_retention_s" {
  description = "DLQ retention in seconds (default 14 days, the maximum)."
  type        = number
  default     = 1209600
}

variable "max_receive_count" {
  description = "Deliveries of a step message before it moves to the DLQ (at least 5)."
  type        = number
  default     = 5
}

# ---------------------------------------------------------------------------------------------
# Functions
# ---------------------------------------------------------------------------------------------
variable "worker_timeout_s" {
  description = "Worker timeout in seconds. The step queue's visibility timeout is derived from it (6 x this + worker_batching_window_s)."
  type        = number
  default     = 60
}

variable "worker_memory_mb" {
  description = "Worker memory in MB."
  type        = number
  default     = 512
}

variable "worker_reserved_concurrency" {
  description = "Worker reserved concurrency (at least worker_maximum_concurrency, or -1 for unreserved)."
  type        = number
  default     = 10
}

variable "worker_batch_size" {
  description = "Step messages per worker invocation (1-10 without a batching window)."
  type        = number
  default     = 10
}

variable "worker_batching_window_s" {
  description = "Seconds the event source mapping may wait to fill a batch (0-300). Adds to the derived visibility timeout."
  type        = number
  default     = 0
}

variable "worker_maximum_concurrency" {
  description = "Most concurrent worker invocations the SQS event source mapping runs (2-1000)."
  type        = number
  default     = 5
}

variable "sweeper_timeout_s" {
  description = "Sweeper timeout in seconds; at most 60 so that one run ends before the next minute's."
  type        = number
  default     = 55

  validation {
    condition     = var.sweeper_timeout_s >= 1 && var.sweeper_timeout_s <= 60
    error_message = "sweeper_timeout_s must be between 1 and 60 seconds: the sweeper runs every minute."
  }
}

variable "sweeper_memory_mb" {
  description = "Sweeper memory in MB."
  type        = number
  default     = 256
}

variable "sweeper_reserved_concurrency" {
  description = "Sweeper reserved concurrency (-1 for unreserved). 1 keeps runs from piling up when one is slow."
  type        = number
  default     = 1
}

variable "control_plane_timeout_s" {
  description = "Control-plane timeout in seconds."
  type        = number
  default     = 10
}

variable "control_plane_memory_mb" {
  description = "Control-plane memory in MB."
  type        = number
  default     = 256
}

variable "control_plane_reserved_concurrency" {
  description = "Control-plane reserved concurrency (-1 for unreserved). Function URLs have no throttling of their own; this is the cap."
  type        = number
  default     = 5
}

variable "log_retention_days" {
  description = "Retention of the three log groups, in days."
  type        = number
  default     = 30
}

# ---------------------------------------------------------------------------------------------
# Encryption and alarms
# ---------------------------------------------------------------------------------------------
variable "kms_key_arn" {
  description = "Customer-managed KMS key ARN for the table, both queues and the functions' environment variables; the roles get kms:Decrypt and kms:GenerateDataKey on it. null uses AWS managed / service-owned keys."
  type        = string
  default     = null
}

variable "log_kms_key_arn" {
  description = "Customer-managed KMS key ARN for the log groups (its key policy must allow logs.<region>.amazonaws.com). null uses service-owned keys."
  type        = string
  default     = null
}

variable "oldest_message_age_alarm_s" {
  description = "Age in seconds of the oldest step message above which the age alarm fires."
  type        = number
  default     = 1800
}

variable "alarm_settings" {
  description = "The optional alarms (each on by default; all need create_alarms): executions_failed (ExecutionsFailed >= executions_failed_threshold in a minute, summed over the three services), dynamodb_throttles (read + write throttle events on the table, GSI1 and GSI2), lambda_throttles (Throttles per function), sweeper_stopped (no sweeper invocation in sweeper_stopped_window_s; missing data breaches; only with the schedule enabled), step_age_near_lease (oldest step message >= lease_age_fraction x LOOM_LEASE_S)."
  type = object({
    executions_failed            = optional(bool, true)
    executions_failed_threshold  = optional(number, 1)
    dynamodb_throttles           = optional(bool, true)
    dynamodb_throttles_threshold = optional(number, 1)
    lambda_throttles             = optional(bool, true)
    lambda_throttles_threshold   = optional(number, 1)
    sweeper_stopped              = optional(bool, true)
    sweeper_stopped_window_s     = optional(number, 300)
    step_age_near_lease          = optional(bool, true)
    lease_age_fraction           = optional(number, 0.5)
  })
  default  = {}
  nullable = false
}

variable "alarm_actions" {
  description = "ARNs (e.g. SNS topics) notified when an alarm fires or recovers."
  type        = list(string)
  default     = []
}

# ---------------------------------------------------------------------------------------------
# Schedules (schedules.tf)
# ---------------------------------------------------------------------------------------------
variable "schedules" {
  description = "Workflows started on a schedule: one EventBridge Scheduler schedule each, in the schedule group <name>, invoking the control plane directly. name (1-64 letters, digits, - _ .), workflow (a deployed workflow), expression (cron(min hour day-of-month month day-of-week year), rate(N unit) or at(yyyy-mm-ddThh:mm:ss)), timezone (IANA, default UTC), input (a JSON object as text, e.g. jsonencode({ scope = \"all\" }); default {}), overlap (skip: start nothing while the schedule's previous execution is live; allow: start anyway; default skip), enabled (default true). Rendered as LOOM_SCHEDULES on the control plane. Empty (default): no schedule group, role or queue."
  type = list(object({
    name       = string
    workflow   = string
    expression = string
    timezone   = optional(string, "UTC")
    input      = optional(string, "{}")
    overlap    = optional(string, "skip")
    enabled    = optional(bool, true)
  }))
  default  = []
  nullable = false

  validation {
    condition     = alltrue([for s in var.schedules : can(regex("^[0-9A-Za-z_.-]{1,64}$", s.name))]) && length(distinct([for s in var.schedules : s.name])) == length(var.schedules)
    error_message = "schedules: each name must be unique and 1-64 letters, digits, '-', '_' or '.' (EventBridge Scheduler's rule); it also names the schedule in `loom schedules`."
  }

  validation {
    condition     = alltrue([for s in var.schedules : can(regex("^\\S+$", s.workflow))])
    error_message = "schedules: workflow must be a workflow name (non-empty, no whitespace), as `loom workflows` lists them."
  }

  validation {
    condition = alltrue([for s in var.schedules : (
      can(regex("^cron\\(\\S+ \\S+ \\S+ \\S+ \\S+ \\S+\\)$", s.expression)) ||
      can(regex("^rate\\((1 (minute|hour|day)|[1-9][0-9]* (minutes|hours|days))\\)$", s.expression)) ||
      can(regex("^at\\([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\)$", s.expression))
    )])
    error_message = "schedules: expression must be cron(minutes hours day-of-month month day-of-week year) with six fields, e.g. cron(0 9 ? * MON-FRI *); rate(1 minute|hour|day) or rate(N minutes|hours|days), e.g. rate(15 minutes); or at(yyyy-mm-ddThh:mm:ss), e.g. at(2026-12-31T23:00:00)."
  }

  # A rate's period at most 100 years (36,500 days), as the control plane takes it.
  validation {
    condition = alltrue([for s in var.schedules : !can(regex("^rate\\([0-9]+ (minute|hour|day)s?\\)$", s.expression)) || try(
      tonumber(regex("^rate\\(([0-9]+) ", s.expression)[0]) * lookup({ minute = 1, hour = 60, day = 1440 }, regex(" (minute|hour|day)", s.expression)[0]) <= 52560000, false
    )])
    error_message = "schedules: a rate's period is at most 36,500 days (100 years), e.g. rate(36500 days) or rate(876000 hours); for a rarer firing use cron(...) with a year, or at(...)."
  }

  validation {
    condition = alltrue([for s in var.schedules : !can(regex("^cron\\(", s.expression)) || try(
      (split(" ", trimsuffix(trimprefix(s.expression, "cron("), ")"))[2] == "?") != (split(" ", trimsuffix(trimprefix(s.expression, "cron("), ")"))[4] == "?"), false
    )])
    error_message = "schedules: in a cron expression exactly one of day-of-month (3rd field) and day-of-week (5th field) must be ?, e.g. cron(0 9 1 * ? *) (the 1st) or cron(0 9 ? * MON *) (Mondays)."
  }

  # Each cron field against its own range and forms (what engine_core.schedules.expressions takes), so a
  # typo fails at `terraform validate`, not at apply or in the control plane.
  validation {
    condition = alltrue([for s in var.schedules : !can(regex("^cron\\(\\S+ \\S+ \\S+ \\S+ \\S+ \\S+\\)$", s.expression)) || alltrue([
      for i, f in split(" ", trimsuffix(trimprefix(s.expression, "cron("), ")")) : can(regex(local.cron_field_patterns[i], f))
    ])])
    error_message = "schedules: a cron field is out of its range or form: minutes 0-59, hours 0-23, day-of-month 1-31 (or ?, L, LW, nW), month 1-12 or JAN-DEC, day-of-week 1-7 or SUN-SAT (or ?, L, nL, n#k with k 1-5), year 1970-2199; each field a list of values, ranges a-b and increments */n or a-b/n (n at least 1), e.g. cron(0,30 9-17 ? * MON-FRI *)."
  }

  validation {
    condition = alltrue([for s in var.schedules : !can(regex("^cron\\(", s.expression)) || alltrue([
      for item in flatten([for f in split(" ", trimsuffix(trimprefix(s.expression, "cron("), ")")) : split(",", split("/", f)[0])]) :
      try(length(split("-", item)) != 2 || (
        try(tonumber(split("-", item)[0]), local.cron_names[upper(split("-", item)[0])]) <= try(tonumber(split("-", item)[1]), local.cron_names[upper(split("-", item)[1])])
      ), true)
    ])])
    error_message = "schedules: a cron range runs backwards (such as FRI-MON or 22-2): Loom takes ascending ranges only; write one that wraps as two, e.g. FRI-SAT,SUN-MON or 22-23,0-2."
  }

  validation {
    condition     = alltrue([for s in var.schedules : !can(regex("^at\\(", s.expression)) || can(timeadd("${trimsuffix(trimprefix(s.expression, "at("), ")")}Z", "0s"))])
    error_message = "schedules: at(yyyy-mm-ddThh:mm:ss) must name a real date and time (no February 30th, no hour 24), e.g. at(2026-12-31T23:00:00)."
  }

  validation {
    condition     = alltrue([for s in var.schedules : contains(["skip", "allow"], s.overlap)])
    error_message = "schedules: overlap must be skip (start nothing while the schedule's previous execution is live) or allow (start anyway)."
  }

  validation {
    condition     = alltrue([for s in var.schedules : can(keys(jsondecode(s.input)))])
    error_message = "schedules: input must be a JSON object as text, e.g. input = jsonencode({ scope = \"all\" }); the workflow gets it as its start input."
  }

  validation {
    condition     = alltrue([for s in var.schedules : can(regex("^[A-Za-z][A-Za-z0-9_+/-]*$", s.timezone))])
    error_message = "schedules: timezone must be an IANA time zone name such as UTC, Europe/Paris or America/New_York."
  }
}

variable "schedule_retry" {
  description = "EventBridge Scheduler's retry policy for every schedule: how long (60-86400 s) and how many times (0-185) it retries a delivery it could not make, before sending it to the <name>-schedules-dlq queue. A delivery the control plane received is idempotent (its token derives from the schedule and the scheduled time); Loom does not back-fill a firing older than the schedule's newest one."
  type = object({
    maximum_event_age_s    = optional(number, 3600)
    maximum_retry_attempts = optional(number, 10)
  })
  default  = {}
  nullable = false

  validation {
    condition     = var.schedule_retry.maximum_event_age_s >= 60 && var.schedule_retry.maximum_event_age_s <= 86400 && var.schedule_retry.maximum_retry_attempts >= 0 && var.schedule_retry.maximum_retry_attempts <= 185 && floor(var.schedule_retry.maximum_retry_attempts) == var.schedule_retry.maximum_retry_attempts
    error_message = "schedule_retry: maximum_event_age_s must be 60-86400 seconds and maximum_retry_attempts a whole number 0-185 (EventBridge Scheduler's limits)."
  }
}
