# Every module with create = false: nothing is created, every output is null, and the plan is empty
# (tests/terraform asserts exactly that). This is how a caller switches Loom off per environment
# without removing the module blocks.
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
  region                      = "us-east-1"
  skip_credentials_validation = true
  skip_metadata_api_check     = true
  skip_requesting_account_id  = true
}

module "loom" {
  source = "../../modules/loom"

  create      = false
  lambda_zips = { worker = "unused.zip", sweeper = "unused.zip", control_plane = "unused.zip" }
}

module "table" {
  source = "../../modules/table"

  create = false
  name   = "unused"
}

module "queue" {
  source = "../../modules/queue"

  create             = false
  name               = "unused"
  consumer_timeout_s = 60
}

module "function" {
  source = "../../modules/function"

  create  = false
  name    = "unused"
  handler = "unused.handler"
}

module "alarms" {
  source = "../../modules/alarms"

  create      = false
  name_prefix = "unused"
  queue_name  = "unused"
  dlq_name    = "unused"
}

output "loom_outputs" {
  description = "Every output of the disabled composition (all null)."
  value       = module.loom
}

output "table_name" {
  description = "null: the table module is disabled."
  value       = module.table.table_name
}
