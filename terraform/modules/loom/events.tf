# Optional status-change events: for every execution that ends (COMPLETED, FAILED) or is CANCELLED,
# the engine puts one event (Source "loom", DetailType "Loom Execution Status Change") on an
# EventBridge bus; see terraform/README.md ("Status-change events") for the shape. The bus is
# created here ("<name>-events") unless status_events.event_bus_name names an existing one.
locals {
  status_events_enabled = var.create && var.status_events.enabled
  status_bus_given      = var.status_events.event_bus_name
  status_bus_given_arn  = local.status_bus_given != null && startswith(coalesce(local.status_bus_given, "-"), "arn:")
  create_status_bus     = local.status_events_enabled && local.status_bus_given == null
  lookup_status_bus_arn = local.status_events_enabled && local.status_bus_given != null && !local.status_bus_given_arn

  # What the functions pass to PutEvents as EventBusName (a name or an ARN; both are accepted).
  # Known at plan time, so the environment never waits for the bus to exist.
  status_bus_reference = !local.status_events_enabled ? null : coalesce(local.status_bus_given, "${var.name}-events")

  status_bus_name = !local.status_events_enabled ? null : (
    local.status_bus_given_arn ? element(split("event-bus/", local.status_bus_given), 1) : local.status_bus_reference
  )

  status_bus_arn = !local.status_events_enabled ? null : (
    local.create_status_bus ? try(aws_cloudwatch_event_bus.status[0].arn, null) :
    local.status_bus_given_arn ? local.status_bus_given :
    "arn:${data.aws_partition.current[0].partition}:events:${data.aws_region.current[0].name}:${data.aws_caller_identity.current[0].account_id}:event-bus/${local.status_bus_given}"
  )

  # Granted to every function: the worker ends executions, the sweeper ends some (caps, unreadable
  # state, housekeeping of a dead worker's ending) and the control plane cancels.
  status_event_statements = local.status_events_enabled ? [{
    sid       = "PublishStatusEvents"
    actions   = ["events:PutEvents"]
    resources = [local.status_bus_arn]
  }] : []
}

resource "aws_cloudwatch_event_bus" "status" {
  count = local.create_status_bus ? 1 : 0

  name = "${var.name}-events"

  tags = var.tags
}

# Only to build the ARN of an existing bus given by name (with data.aws_region.current, main.tf).
data "aws_partition" "current" {
  count = local.lookup_status_bus_arn ? 1 : 0
}

data "aws_caller_identity" "current" {
  count = local.lookup_status_bus_arn ? 1 : 0
}
