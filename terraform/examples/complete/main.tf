# The smallest call of the composition from inside this repository: one module call plus a provider and
# an SNS topic for the alarms, with the zips of `make build` (dist/lambda/*.zip). `terraform validate`
# runs here in `make tf-validate`. A platform team's own root, with its guardrails and nothing pointing
# into this repository, is examples/vendored.
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
  region = "us-east-1"
}

resource "aws_sns_topic" "oncall" {
  #checkov:skip=CKV_AWS_26:CloudWatch alarms cannot publish to a topic encrypted with the AWS managed key aws/sns; encrypt with a customer-managed key whose policy allows cloudwatch.amazonaws.com if alarm contents are sensitive.
  name = "loom-example-oncall"
}

module "loom" {
  source = "../../modules/loom"

  name = "loom-example"
  lambda_zips = {
    worker        = "${path.module}/../../../dist/lambda/worker.zip"
    sweeper       = "${path.module}/../../../dist/lambda/sweeper.zip"
    control_plane = "${path.module}/../../../dist/lambda/control-plane.zip"
  }

  shard_count        = 4
  table_billing_mode = "PAY_PER_REQUEST"
  worker_timeout_s   = 120
  alarm_actions      = [aws_sns_topic.oncall.arn]
  tags               = { CostCenter = "orders" }
}

output "function_url" {
  description = "The control plane's Function URL (AWS_IAM)."
  value       = module.loom.function_url
}
