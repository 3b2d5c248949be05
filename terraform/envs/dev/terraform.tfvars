# What makes dev dev (the rest of envs/dev is the same as envs/prod). `-var` on the command line wins.
environment                 = "dev"
name                        = "loom-dev"
table_billing_mode          = "PROVISIONED" # 25 RCU / 25 WCU: the always-free tier
deletion_protection_enabled = false         # a throwaway environment: `terraform destroy` removes the table
log_retention_days          = 30
