terraform {
  required_version = ">= 1.9"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "5.100.0"
    }
  }

  # State stays in this directory (terraform.tfstate, git-ignored): the emulator is throwaway.
}
