# One role per function, with one inline policy: the caller's statements plus writing to the
# function's own log group. Statements are validated to contain no "*" (see variables.tf).
# extra_policy_statements (what a workflow's own steps call) get a second inline policy of their own,
# so Loom's grants and the team's stay apart. AWS managed policies are attached only for what cannot be
# granted without Resource "*": the network interfaces of a function in a VPC, and X-Ray's Active tracing.
locals {
  log_statement = {
    sid     = "WriteOwnLogGroup"
    actions = ["logs:CreateLogStream", "logs:PutLogEvents"]
    # Log stream names are chosen by Lambda at run time, so the only "*" Loom's policies carry is
    # the stream suffix of the function's own log group.
    resources = ["${try(aws_cloudwatch_log_group.this[0].arn, "")}:*"]
  }

  statements = concat(var.policy_statements, [local.log_statement])

  managed_policies = concat(
    var.vpc_config == null ? [] : ["service-role/AWSLambdaVPCAccessExecutionRole"],
    var.tracing_mode == "Active" ? ["AWSXRayDaemonWriteAccess"] : [],
  )
}

# Only to build the ARNs of AWS managed policies in the role's partition (aws, aws-cn, aws-us-gov).
data "aws_partition" "current" {
  count = var.create && length(local.managed_policies) > 0 ? 1 : 0
}

resource "aws_iam_role" "this" {
  count = var.create ? 1 : 0

  name        = coalesce(var.role_name, var.name)
  path        = var.role_path
  description = "Execution role of the Lambda function ${var.name}."
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "LambdaAssumeRole"
      Effect    = "Allow"
      Principal = { Service = "lambda.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })
  permissions_boundary = var.role_permissions_boundary

  tags = var.tags
}

resource "aws_iam_role_policy" "this" {
  count = var.create ? 1 : 0

  name = "${var.name}-least-privilege"
  role = aws_iam_role.this[0].id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [for s in local.statements : {
      Sid      = s.sid
      Effect   = "Allow"
      Action   = s.actions
      Resource = s.resources
    }]
  })
}

resource "aws_iam_role_policy" "extra" {
  count = var.create && length(var.extra_policy_statements) > 0 ? 1 : 0

  name = "${var.name}-workflow-steps"
  role = aws_iam_role.this[0].id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [for s in var.extra_policy_statements : {
      Sid      = s.sid
      Effect   = "Allow"
      Action   = s.actions
      Resource = s.resources
    }]
  })
}

resource "aws_iam_role_policy_attachment" "managed" {
  for_each = var.create ? toset(local.managed_policies) : toset([])

  role       = aws_iam_role.this[0].name
  policy_arn = "arn:${data.aws_partition.current[0].partition}:iam::aws:policy/${each.value}"
}
