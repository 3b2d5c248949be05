variable "region" {
  description = "AWS region of the stack."
  type        = string
  default     = "eu-west-1"
}

variable "artifacts_dir" {
  description = "Directory of this repository holding the three zips of a Loom release (worker.zip, sweeper.zip, control-plane.zip), checked against the release's SHA256SUMS."
  type        = string
  default     = "artifacts"
}

variable "alarm_actions" {
  description = "SNS topics notified when a Loom alarm fires or recovers."
  type        = list(string)
  default     = []
}

variable "permissions_boundary_arn" {
  description = "The permissions boundary the account requires on every role."
  type        = string
}

variable "private_subnet_ids" {
  description = "Private subnets for the worker (with NAT, or VPC endpoints for DynamoDB and SQS)."
  type        = list(string)
}

variable "worker_security_group_ids" {
  description = "Security groups of the worker: egress to the orders database and to AWS's endpoints."
  type        = list(string)
}

variable "documents_bucket" {
  description = "Bucket whose incoming/ prefix the order workflow reads."
  type        = string
}

variable "payment_api_secret_arn" {
  description = "Secrets Manager secret holding the payment provider's API key."
  type        = string
}

variable "orders_app_role_arn" {
  description = "IAM role of the orders application: it starts order_fulfillment executions."
  type        = string
}

variable "oncall_role_arn" {
  description = "IAM role the on-call engineers assume: they operate every workflow and start the others."
  type        = string
}
