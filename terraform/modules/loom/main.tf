# Loom on AWS: the single table, the step queue with its DLQ, the worker, sweeper and control-plane
# functions, and their alarms. This is the module a platform team vendors; terraform/envs/* are
# thin callers of it.
locals {
  table_name    = coalesce(var.table_name, var.name)
  queue_name    = "${var.name}-steps"
  function_name = { for k, suffix in { worker = "worker", sweeper = "sweeper", control_plane = "control-plane" } : k => "${var.name}-${suffix}" }
  # POWERTOOLS_SERVICE_NAME of each function, the `service` dimension of Loom's custom metrics, and the
  # metrics' namespace: both from the stack's name, so two stacks in one account and region never
  # count (and alarm on) each other's failed executions.
  service_name      = local.function_name
  metrics_namespace = coalesce(var.metrics_namespace, "Loom/${var.name}")
  # IAM role names are global to the account: the region keeps the same stack name in two regions apart.
  region    = try(data.aws_region.current[0].name, "")
  role_name = { for k, fn in local.function_name : k => "${fn}-${local.region}" }
  # Loom's version (terraform/modules/VERSION): the tag these modules were released under, loom-v<version>.
  loom_version = trimspace(file("${path.module}/../VERSION"))

  # The lease of an in-flight step message (LOOM_LEASE_S): the sweeper leaves an execution alone
  # for this long after enqueueing its step. Defaults to the queue's visibility timeout, the time
  # SQS itself waits before redelivering an unanswered message.
  lease_s = coalesce(var.lease_s, module.queue.visibility_timeout_s, 0)

  # The attempts cap grows with the steps cap (engine_core.settings derives it the same way).
  max_total_attempts = coalesce(var.max_total_attempts, max(5000, 5 * var.max_steps))

  # What extra_environment_variables take of Lambda's 4 KB per function (keys and values).
  extra_environment_size = sum(concat([0], [for k, v in var.extra_environment_variables : length(k) + length(v)]))

  # Every function gets every LOOM_* setting, so a handler never starts half-configured; see
  # packages/engine-core/src/engine_core/settings.py and bootstrap.py for the readers.
  common_environment = merge(var.extra_environment_variables, {
    LOOM_TABLE_NAME         = module.table.table_name
    LOOM_QUEUE_URL          = module.queue.queue_url
    LOOM_DLQ_URL            = module.queue.dlq_url
    LOOM_SHARDS             = tostring(var.shard_count)
    LOOM_LEASE_S            = tostring(local.lease_s)
    LOOM_RETENTION_DAYS     = tostring(var.retention_days)
    LOOM_MAX_STEPS          = tostring(var.max_steps)
    LOOM_MAX_TOTAL_ATTEMPTS = tostring(local.max_total_attempts)
    LOOM_SWEEP_MAX_ITEMS    = tostring(var.sweep_max_items)
    LOOM_FUNCTION_TIMEOUT_S = tostring(var.worker_timeout_s)
    LOOM_MAX_CHAIN_STEPS    = tostring(var.max_chain_steps)
    # Empty when status_events is off: present either way, so a handler never starts half-configured.
    LOOM_EVENT_BUS_NAME          = local.status_bus_reference == null ? "" : local.status_bus_reference
    POWERTOOLS_METRICS_NAMESPACE = local.metrics_namespace
    LOG_LEVEL                    = var.log_level
  })

  # What every function shares of its packaging and its role.
  function_settings = {
    architecture              = var.architecture
    tracing_mode              = var.tracing_mode
    role_path                 = var.iam_role_path
    role_permissions_boundary = var.iam_permissions_boundary_arn
  }
}

data "aws_region" "current" {
  count = var.create ? 1 : 0
}

module "table" {
  source = "../table"

  create = var.create
  name   = local.table_name

  billing_mode       = var.table_billing_mode
  read_capacity      = var.table_read_capacity
  write_capacity     = var.table_write_capacity
  gsi_read_capacity  = var.gsi_read_capacity
  gsi_write_capacity = var.gsi_write_capacity

  point_in_time_recovery_enabled = var.point_in_time_recovery_enabled
  deletion_protection_enabled    = var.deletion_protection_enabled
  kms_key_arn                    = var.kms_key_arn

  tags = var.tags
}

module "queue" {
  source = "../queue"

  create = var.create
  name   = local.queue_name

  consumer_timeout_s         = var.worker_timeout_s
  consumer_batching_window_s = var.worker_batching_window_s

  message_retention_s     = var.queue_message_retention_s
  dlq_message_retention_s = var.dlq_message_retention_s
  max_receive_count       = var.max_receive_count
  kms_master_key_id       = var.kms_key_arn

  tags = var.tags
}

module "worker" {
  source = "../function"

  create      = var.create
  name        = local.function_name.worker
  description = "Loom worker: runs one workflow step per SQS step message."
  zip_path    = var.lambda_zips.worker
  role_name   = local.role_name.worker
  handler     = "loom_worker.handler.handler"
  runtime     = var.runtime

  architecture              = local.function_settings.architecture
  tracing_mode              = local.function_settings.tracing_mode
  role_path                 = local.function_settings.role_path
  role_permissions_boundary = local.function_settings.role_permissions_boundary

  memory_mb            = var.worker_memory_mb
  timeout_s            = var.worker_timeout_s
  reserved_concurrency = var.worker_reserved_concurrency
  kms_key_arn          = var.kms_key_arn
  log_retention_days   = var.log_retention_days
  log_kms_key_id       = var.log_kms_key_arn

  environment_variables = merge(local.common_environment, {
    POWERTOOLS_SERVICE_NAME = local.service_name.worker
    # Its own timeout: the AWS clients' read timeout is a sixth of it (bootstrap.py), so a hung call fails
    # inside the invocation instead of timing it out.
    LOOM_INVOCATION_TIMEOUT_S = tostring(var.worker_timeout_s)
  })
  policy_statements       = var.create ? local.worker_statements : []
  extra_policy_statements = var.worker_policy_statements
  vpc_config              = var.worker_vpc_config

  sqs_trigger = {
    queue_arn           = module.queue.queue_arn
    enabled             = var.worker_event_source_enabled
    batch_size          = var.worker_batch_size
    batching_window_s   = var.worker_batching_window_s
    maximum_concurrency = var.worker_maximum_concurrency
  }

  # See the recursion-config comment in modules/function/main.tf: the worker's SQS loop is the
  # product, so it must not be cut off at 16 hops.
  recursive_loop = var.manage_recursion_config ? "Allow" : null

  tags = var.tags
}

module "sweeper" {
  source = "../function"

  create      = var.create
  name        = local.function_name.sweeper
  description = "Loom sweeper: re-drives due and stalled executions from the GSI1 due-index every minute."
  zip_path    = var.lambda_zips.sweeper
  role_name   = local.role_name.sweeper
  handler     = "loom_sweeper.handler.handler"
  runtime     = var.runtime

  architecture              = local.function_settings.architecture
  tracing_mode              = local.function_settings.tracing_mode
  role_path                 = local.function_settings.role_path
  role_permissions_boundary = local.function_settings.role_permissions_boundary

  memory_mb            = var.sweeper_memory_mb
  timeout_s            = var.sweeper_timeout_s
  reserved_concurrency = var.sweeper_reserved_concurrency
  kms_key_arn          = var.kms_key_arn
  log_retention_days   = var.log_retention_days
  log_kms_key_id       = var.log_kms_key_arn

  environment_variables = merge(local.common_environment, {
    POWERTOOLS_SERVICE_NAME   = local.service_name.sweeper
    LOOM_INVOCATION_TIMEOUT_S = tostring(var.sweeper_timeout_s)
  })
  policy_statements = var.create ? local.sweeper_statements : []

  schedule = {
    expression = "rate(1 minute)"
    enabled    = var.sweeper_schedule_enabled
  }

  tags = var.tags
}

module "control_plane" {
  source = "../function"

  create      = var.create
  name        = local.function_name.control_plane
  description = "Loom control plane: start, status and history over an AWS_IAM Function URL."
  zip_path    = var.lambda_zips.control_plane
  role_name   = local.role_name.control_plane
  handler     = "loom_control_plane.handler.handler"
  runtime     = var.runtime

  architecture              = local.function_settings.architecture
  tracing_mode              = local.function_settings.tracing_mode
  role_path                 = local.function_settings.role_path
  role_permissions_boundary = local.function_settings.role_permissions_boundary

  memory_mb            = var.control_plane_memory_mb
  timeout_s            = var.control_plane_timeout_s
  reserved_concurrency = var.control_plane_reserved_concurrency
  kms_key_arn          = var.kms_key_arn
  log_retention_days   = var.log_retention_days
  log_kms_key_id       = var.log_kms_key_arn

  environment_variables = merge(local.common_environment, {
    POWERTOOLS_SERVICE_NAME   = local.service_name.control_plane
    LOOM_INVOCATION_TIMEOUT_S = tostring(var.control_plane_timeout_s)
    # Who may start and operate which workflow (loom_control_plane/access.py); empty: everyone the
    # Function URL lets in.
    LOOM_WORKFLOW_ACCESS = length(var.workflow_access) == 0 ? "" : jsonencode(var.workflow_access)
    # The deployed schedules (schedules.tf; engine_core/schedules/config.py); empty: none.
    LOOM_SCHEDULES = local.schedules_environment
  })
  policy_statements = var.create ? local.control_plane_statements : []

  create_function_url = true

  tags = var.tags
}

module "alarms" {
  source = "../alarms"

  create      = var.create && var.create_alarms
  name_prefix = var.name
  queue_name  = coalesce(module.queue.queue_name, local.queue_name)
  dlq_name    = coalesce(module.queue.dlq_name, "${local.queue_name}-dlq")
  function_names = {
    worker        = local.function_name.worker
    sweeper       = local.function_name.sweeper
    control-plane = local.function_name.control_plane
  }

  oldest_message_age_threshold_s = var.oldest_message_age_alarm_s

  # Executions that end FAILED: ExecutionsFailed in the metrics namespace, one series per service.
  metrics_namespace           = var.alarm_settings.executions_failed ? local.metrics_namespace : null
  metrics_service_names       = var.alarm_settings.executions_failed ? values(local.service_name) : []
  failed_executions_threshold = var.alarm_settings.executions_failed_threshold

  table_name = var.alarm_settings.dynamodb_throttles ? local.table_name : null
  # The due index (GSI1) and the list index (GSI2): a throttled index also throttles the table's writes.
  gsi_names                    = var.alarm_settings.dynamodb_throttles ? [coalesce(module.table.gsi_name, "GSI1"), coalesce(module.table.list_index_name, "GSI2")] : []
  dynamodb_throttles_threshold = var.alarm_settings.dynamodb_throttles_threshold

  function_throttles_threshold = var.alarm_settings.lambda_throttles ? var.alarm_settings.lambda_throttles_threshold : null

  # A disabled schedule stops the sweeper on purpose: no alarm then.
  heartbeat_function_names = var.alarm_settings.sweeper_stopped && var.sweeper_schedule_enabled ? { sweeper = local.function_name.sweeper } : {}
  heartbeat_window_s       = var.alarm_settings.sweeper_stopped_window_s

  lease_s            = var.create && var.alarm_settings.step_age_near_lease ? local.lease_s : null
  lease_age_fraction = var.alarm_settings.lease_age_fraction

  alarm_actions = var.alarm_actions
  ok_actions    = var.alarm_actions

  tags = var.tags
}

check "lease_covers_visibility_timeout" {
  assert {
    condition     = !var.create || local.lease_s >= coalesce(module.queue.visibility_timeout_s, 0)
    error_message = "lease_s (${local.lease_s} s) is shorter than the step queue's visibility timeout: the sweeper will re-drive steps whose message SQS still holds in flight. Harmless (writes are versioned) but wasteful; leave lease_s null to use the visibility timeout."
  }
}
