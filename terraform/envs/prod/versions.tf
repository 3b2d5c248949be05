terraform {
  required_version = ">= 1.9"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "5.100.0"
    }
  }

  # Remote state in S3 with S3-native locking. The bucket, key and region come from a backend
  # config file at init time (see backend.hcl.example):
  #   terraform init -backend-config=backend.hcl
  # `terraform init -backend=false` (what `make tf-validate` runs) needs no AWS access.
  backend "s3" {}
}
