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
  description = "Directory holding worker.zip, sweeper.zip and control-plane.zip for Lambda's python3.12. null means <repo>/dist/lambda, written by `make build`."
  type        = string
  default     = null

  validation {
    condition     = alltrue([for z in ["worker.zip", "sweeper.zip", "control-plane.zip"] : fileexists("${coalesce(var.dist_dir, "${path.module}/../../../dist/lambda")}/${z}")])
    error_message = "Lambda zips missing in ${coalesce(var.dist_dir, abspath("${path.module}/../../../dist/lambda"))}: run `make build` first (or point dist_dir at worker.zip, sweeper.zip and control-plane.zip)."
  }
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
