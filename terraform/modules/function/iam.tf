# One role per function, with one inline policy: the caller's statements plus writing to the
# function's own log group. Statements are validated to contain no "*" (see variables.tf).
locals {
  log_statement = {
    sid     = "WriteOwnLogGroup"
    actions = ["logs:CreateLogStream", "logs:PutLogEvents"]
    # Log stream names are chosen by Lambda at run time, so the only "*" Loom's policies carry is
    # the stream suffix of the function's own log group.
    resources = ["${try(aws_cloudwatch_log_group.this[0].arn, "")}:*"]
  }

  statements = concat(var.policy_statements, [local.log_statement])
}

resource "aws_iam_role" "this" {
  count = var.create ? 1 : 0

  name        = coalesce(var.role_name, var.name)
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
