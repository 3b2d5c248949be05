variable "endpoint" {
  description = "Base URL of the local AWS emulator (moto's server, started with `moto_server -H 127.0.0.1 -p PORT`)."
  type        = string
  default     = "http://127.0.0.1:5000"

  validation {
    condition     = can(regex("^https?://(127\\.[0-9]+\\.[0-9]+\\.[0-9]+|localhost|\\[::1\\])(:[0-9]+)?/?$", var.endpoint))
    error_message = "endpoint must be a loopback URL such as http://127.0.0.1:5000: the local environment only targets an emulator on this machine."
  }
}

variable "region" {
  description = "Region name the emulator uses."
  type        = string
  default     = "us-east-1"
}

variable "name" {
  description = "Prefix of every resource name."
  type        = string
  default     = "loom-local"
}

variable "dist_dir" {
  description = "Directory holding worker.zip, sweeper.zip and control-plane.zip built for this machine's Python. null means <repo>/dist/local, written by `make build-local`."
  type        = string
  default     = null

  validation {
    condition     = alltrue([for z in ["worker.zip", "sweeper.zip", "control-plane.zip"] : fileexists("${coalesce(var.dist_dir, "${path.module}/../../../dist/local")}/${z}")])
    error_message = "Lambda zips missing in ${coalesce(var.dist_dir, abspath("${path.module}/../../../dist/local"))}: run `make build-local` first (or point dist_dir at worker.zip, sweeper.zip and control-plane.zip)."
  }
}

variable "runtime" {
  description = "Runtime recorded on the functions. moto stores any string; the zips from `make build-local` are built for this machine's Python 3.11."
  type        = string
  default     = "python3.11"
}

variable "shard_count" {
  description = "Due-index shard count (LOOM_SHARDS)."
  type        = number
  default     = 4
}

variable "log_level" {
  description = "LOG_LEVEL of the functions."
  type        = string
  default     = "DEBUG"
}

variable "worker_timeout_s" {
  description = "Worker timeout in seconds; the step queue's visibility timeout is 6 x this. Short here so local redeliveries come quickly, and so a killed worker's step (re-driven only after its invocation's deadline) resumes within seconds."
  type        = number
  default     = 20
}

variable "lease_s" {
  description = "LOOM_LEASE_S override, e.g. 5 for a demo in which the sweeper recovers a killed worker's step quickly. null uses the visibility timeout."
  type        = number
  default     = null
}

variable "extra_environment_variables" {
  description = "More environment variables for the three functions (the LOOM_* ones set by the module win)."
  type        = map(string)
  default     = {}
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

variable "workflow_access" {
  description = "Per-workflow allow-list of who may start, operate and send events to each workflow (see modules/loom). The local stack's caller is always \"local\": { order_fulfillment = { start = [\"local\"], operate = [] } } lets you start orders but not cancel them. {}: none."
  type = map(object({
    start   = list(string)
    operate = list(string)
    send    = optional(list(string))
  }))
  default = {}
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
