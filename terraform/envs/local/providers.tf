# Every service Loom uses, pointed at the local emulator (moto's server). The credentials are
# dummies the emulator accepts; nothing here can reach AWS.
provider "aws" {
  #checkov:skip=CKV_AWS_41:Dummy credentials for the local emulator on 127.0.0.1, not real secrets.
  region     = var.region
  access_key = "test"
  secret_key = "test"

  skip_credentials_validation = true
  skip_metadata_api_check     = true
  skip_requesting_account_id  = true
  skip_region_validation      = true

  endpoints {
    cloudwatch = var.endpoint
    dynamodb   = var.endpoint
    events     = var.endpoint
    iam        = var.endpoint
    kms        = var.endpoint
    lambda     = var.endpoint
    logs       = var.endpoint
    scheduler  = var.endpoint
    sqs        = var.endpoint
    sts        = var.endpoint
  }

  default_tags {
    tags = {
      Project     = "loom"
      Environment = "local"
    }
  }
}
