# Credentials come from the standard AWS chain (AWS_PROFILE, SSO, environment, instance role).
provider "aws" {
  region              = var.region
  allowed_account_ids = var.allowed_account_ids

  default_tags {
    tags = {
      Project     = "loom"
      Environment = "dev"
    }
  }
}
