locals {
  # Relative to the env directory, not absolute, so the functions' recorded filename stays the same
  # across checkouts and machines.
  dist_dir = coalesce(var.dist_dir, "${path.module}/../../../dist/local")
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
  runtime     = var.runtime
  shard_count = var.shard_count
  log_level   = var.log_level

  # moto's event source mapping invokes the function through Docker inside SendMessage and loses
  # the message when Docker is missing. Disabled, messages stay in the queue for the local poller.
  worker_event_source_enabled = false

  # moto 5.2.1 answers PutFunctionRecursionConfig with 404 ("not yet implemented"). The setting has
  # no meaning in the emulator anyway; dev and prod keep it (and a test asserts so from their plans).
  manage_recursion_config = false

  # A throwaway table: `terraform destroy` must be able to remove it.
  deletion_protection_enabled = false

  worker_timeout_s            = var.worker_timeout_s
  lease_s                     = var.lease_s
  extra_environment_variables = var.extra_environment_variables
  status_events               = var.status_events
  workflow_access             = var.workflow_access
  schedules                   = var.schedules
}

# The local environment's one output more than outputs.tf (which is the same in every environment).
output "endpoint" {
  description = "The emulator these resources live in."
  value       = var.endpoint
}
