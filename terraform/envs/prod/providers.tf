# The same file in envs/dev and envs/prod (tests/terraform/test_envs.py checks it). What makes an
# environment is its terraform.tfvars.

# Credentials come from the standard AWS chain (AWS_PROFILE, SSO, environment, instance role).
provider "aws" {
  region              = var.region
  allowed_account_ids = var.allowed_account_ids

  default_tags {
    tags = {
      Project     = "loom"
      Environment = var.environment
    }
  }
}
