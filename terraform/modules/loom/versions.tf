terraform {
  # Cross-variable validation and check blocks need 1.9.
  required_version = ">= 1.9"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # aws_lambda_function_recursion_config arrived in 5.67.0.
      version = ">= 5.67, < 6.0"
    }
  }
}
