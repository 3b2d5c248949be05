terraform {
  # Cross-variable validation (DLQ retention against the queue's) needs 1.9.
  required_version = ">= 1.9"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.67, < 6.0"
    }
  }
}
