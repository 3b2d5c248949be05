# The same file in envs/dev and envs/prod (tests/terraform/test_envs.py checks it). What makes an
# environment is its terraform.tfvars.

# ---------------------------------------------------------------------------------------------
# The environment's own values: no defaults here, terraform.tfvars sets them (-var overrides).
# ---------------------------------------------------------------------------------------------

variable "environment" {
  description = "Environment name, the Environment tag of every resource."
  type        = string
}

variable "name" {
  description = "Prefix of every resource name."
  type        = string
}

variable "table_billing_mode" {
  description = "PROVISIONED (25 RCU / 25 WCU split between table and GSI1: the always-free tier) or PAY_PER_REQUEST (on-demand)."
  type        = string
}

variable "deletion_protection_enabled" {
  description = "Whether the table refuses deletion; `terraform destroy` fails until an apply turns it off."
  type        = bool
}

variable "log_retention_days" {
  description = "Retention of the functions' log groups, in days."
  type        = number
}

# ---------------------------------------------------------------------------------------------
# The same defaults in every environment.
# ---------------------------------------------------------------------------------------------

variable "region" {
  description = "AWS region to deploy to."
  type        = string
  default     = "us-east-1"
}

variable "allowed_account_ids" {
  description = "AWS account IDs this environment may be applied to; set it so a wrong profile fails fast. null allows any."
  type        = list(string)
  default     = null
}

variable "dist_dir" {
  description = "Directory holding worker.zip, sweeper.zip and control-plane.zip for Lambda's python3.12. null means <repo>/dist/lambda, written by `make build` (dist/lambda-arm64 with architecture = \"arm64\", written by `make build LAMBDA_ARCH=arm64`)."
  type        = string
  default     = null

  validation {
    condition     = alltrue([for z in ["worker.zip", "sweeper.zip", "control-plane.zip"] : fileexists("${coalesce(var.dist_dir, "${path.module}/../../../dist/${var.architecture == "arm64" ? "lambda-arm64" : "lambda"}")}/${z}")])
    error_message = "Lambda zips missing in ${coalesce(var.dist_dir, abspath("${path.module}/../../../dist/${var.architecture == "arm64" ? "lambda-arm64" : "lambda"}"))}: run `make build${var.architecture == "arm64" ? " LAMBDA_ARCH=arm64" : ""}` first (or point dist_dir at worker.zip, sweeper.zip and control-plane.zip)."
  }
}

variable "architecture" {
  description = "x86_64 (default) or arm64; the zips must be built for it (`make build LAMBDA_ARCH=arm64`)."
  type        = string
  default     = "x86_64"
}

variable "tracing_mode" {
  description = "X-Ray tracing of the functions: PassThrough (default) or Active."
  type        = string
  default     = "PassThrough"
}

variable "iam_permissions_boundary_arn" {
  description = "Permissions boundary for the execution roles, if the account requires one."
  type        = string
  default     = null
}

variable "iam_role_path" {
  description = "Path of the execution roles (e.g. /loom/)."
  type        = string
  default     = "/"
}

variable "worker_vpc_config" {
  description = "Subnets and security groups for the worker (null: none); see modules/loom."
  type = object({
    subnet_ids         = list(string)
    security_group_ids = list(string)
  })
  default = null
}

variable "worker_policy_statements" {
  description = "IAM statements ({ sid, actions, resources }) for what the workflow steps call; see modules/loom."
  type = list(object({
    sid       = string
    actions   = list(string)
    resources = list(string)
  }))
  default = []
}

variable "workflow_access" {
  description = "Per-workflow allow-list of who may start (start), operate (operate) and send events to (send) each workflow; see modules/loom and docs/deploying.md. {}: none."
  type = map(object({
    start   = list(string)
    operate = list(string)
    send    = optional(list(string))
  }))
  default = {}
}

variable "shard_count" {
  description = "Due-index shard count (LOOM_SHARDS). Fixed for the table's life: choose before the first apply."
  type        = number
  default     = 4
}

variable "worker_reserved_concurrency" {
  description = "Worker reserved concurrency; -1 for unreserved (needed on accounts with the new-account concurrency quota of 10)."
  type        = number
  default     = 10
}

variable "sweeper_reserved_concurrency" {
  description = "Sweeper reserved concurrency; -1 for unreserved."
  type        = number
  default     = 1
}

variable "control_plane_reserved_concurrency" {
  description = "Control-plane reserved concurrency; -1 for unreserved."
  type        = number
  default     = 5
}

variable "log_level" {
  description = "LOG_LEVEL of the functions."
  type        = string
  default     = "INFO"
}

variable "kms_key_arn" {
  description = "Optional customer-managed KMS key for the table, queues and environment variables."
  type        = string
  default     = null
}

variable "alarm_actions" {
  description = "ARNs (e.g. an SNS topic) notified by the alarms."
  type        = list(string)
  default     = []
}

variable "status_events" {
  description = "Status-change events on EventBridge (see terraform/README.md, \"Status-change events\"): { enabled = true } creates the bus <name>-events; add event_bus_name to use an existing bus (name or ARN). Off by default."
  type = object({
    enabled        = optional(bool, false)
    event_bus_name = optional(string)
  })
  default  = {}
  nullable = false
}

variable "alarm_settings" {
  description = "The optional alarms of modules/loom (failed executions, DynamoDB and Lambda throttles, sweeper stopped, step age near the lease), each on by default; e.g. { lambda_throttles = false }."
  type        = any
  default     = {}
}

variable "schedules" {
  description = "Workflows started on a schedule (see modules/loom: name, workflow, expression, timezone, input as JSON text, overlap skip|allow, enabled). []: none."
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
}
