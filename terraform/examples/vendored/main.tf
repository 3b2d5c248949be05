# A platform team's own Terraform root calling the vendored composition, as docs/deploying.md shows
# it, with what an account's guardrails usually ask for: a permissions boundary and a role path, the
# worker in private subnets, the AWS calls its workflow steps make, and who may start and operate
# which workflow. Everything here is the team's: its provider, its artifacts directory, its variables
# (terraform.tfvars.example); nothing points into Loom's build or dist directories.
#
# `make tf-validate` validates it; tests/terraform plans it and applies it to moto (with the network,
# the boundary policy and the roles created there first). The part between the two "snippet" markers
# is docs/deploying.md's snippet, where the source reads "./vendor/loom/modules/loom" (a test compares
# them).
terraform {
  required_version = ">= 1.9"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.67, < 6.0"
    }
  }
}

provider "aws" {
  region = var.region
}

# -- snippet: begin ---------------------------------------------------------------------------
module "loom" {
  source = "../../modules/loom"

  name = "loom-orders"
  lambda_zips = { # the zips of a Loom release (or of `make build` in Loom's repository)
    worker        = "${var.artifacts_dir}/worker.zip"
    sweeper       = "${var.artifacts_dir}/sweeper.zip"
    control_plane = "${var.artifacts_dir}/control-plane.zip"
  }
  shard_count   = 4 # fixed for the table's life
  alarm_actions = var.alarm_actions
  tags          = { CostCenter = "orders" }

  # Account guardrails.
  iam_permissions_boundary_arn = var.permissions_boundary_arn
  iam_role_path                = "/loom/"
  worker_vpc_config = { # the worker's steps reach the orders database; DynamoDB and SQS through endpoints
    subnet_ids         = var.private_subnet_ids
    security_group_ids = var.worker_security_group_ids
  }

  # What the workflow steps call beyond Loom.
  worker_policy_statements = [
    {
      sid       = "ReadOrderDocuments"
      actions   = ["s3:GetObject"]
      resources = ["arn:aws:s3:::${var.documents_bucket}/incoming/*"]
    },
    {
      sid       = "ReadPaymentApiKey"
      actions   = ["secretsmanager:GetSecretValue"]
      resources = [var.payment_api_secret_arn]
    },
  ]

  # Who may start and operate which workflow; any other caller allowed to invoke the URL only reads.
  workflow_access = {
    order_fulfillment = {
      start   = [var.orders_app_role_arn]
      operate = [var.oncall_role_arn]
    }
    "*" = {
      start   = [var.oncall_role_arn]
      operate = [var.oncall_role_arn]
    }
  }
}

# What `loom --env-dir <this directory>` reads: the API's URL, and the queues for `loom dlq`.
output "function_url" {
  value = module.loom.function_url
}

output "queue_url" {
  value = module.loom.queue_url
}

output "dlq_url" {
  value = module.loom.dlq_url
}

output "region" {
  value = var.region
}
# -- snippet: end -----------------------------------------------------------------------------

output "function_names" {
  description = "The three functions, <name>-worker, <name>-sweeper and <name>-control-plane."
  value       = module.loom.function_names
}

output "table_name" {
  description = "The DynamoDB table (also the prefix of the alarms' names)."
  value       = module.loom.table_name
}

output "role_names" {
  description = "The execution roles, <name>-<function>-<region>, under the path /loom/."
  value       = module.loom.role_names
}
