# The same file in envs/dev and envs/prod (tests/terraform/test_envs.py checks it). What makes an
# environment is its terraform.tfvars.

locals {
  # Relative to the env directory, not absolute, so the functions' recorded filename stays the same
  # across checkouts and machines. `make build` writes x86_64 zips to dist/lambda, `make build
  # LAMBDA_ARCH=arm64` arm64 ones to dist/lambda-arm64.
  dist_dir = coalesce(var.dist_dir, "${path.module}/../../../dist/${var.architecture == "arm64" ? "lambda-arm64" : "lambda"}")
  lambda_zips = {
    worker        = "${local.dist_dir}/worker.zip"
    sweeper       = "${local.dist_dir}/sweeper.zip"
    control_plane = "${local.dist_dir}/control-plane.zip"
  }
}

module "loom" {
  source = "../../modules/loom"

  name        = var.name
  lambda_zips = local.lambda_zips
  runtime     = "python3.12"
  shard_count = var.shard_count
  log_level   = var.log_level

  table_billing_mode          = var.table_billing_mode
  deletion_protection_enabled = var.deletion_protection_enabled
  kms_key_arn                 = var.kms_key_arn

  worker_reserved_concurrency        = var.worker_reserved_concurrency
  sweeper_reserved_concurrency       = var.sweeper_reserved_concurrency
  control_plane_reserved_concurrency = var.control_plane_reserved_concurrency
  log_retention_days                 = var.log_retention_days

  alarm_actions  = var.alarm_actions
  alarm_settings = var.alarm_settings
  status_events  = var.status_events

  architecture                 = var.architecture
  tracing_mode                 = var.tracing_mode
  iam_permissions_boundary_arn = var.iam_permissions_boundary_arn
  iam_role_path                = var.iam_role_path
  worker_vpc_config            = var.worker_vpc_config
  worker_policy_statements     = var.worker_policy_statements
  workflow_access              = var.workflow_access
  schedules                    = var.schedules

  # Defaults kept on purpose (asserted by tests/terraform): the worker's event source mapping is
  # enabled with ReportBatchItemFailures, and its recursive-loop setting is Allow.
}
