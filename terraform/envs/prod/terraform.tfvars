# What makes prod prod (the rest of envs/prod is the same as envs/dev). `-var` on the command line wins.
environment                 = "prod"
name                        = "loom-prod"
table_billing_mode          = "PAY_PER_REQUEST" # on-demand: no throttling at the free tier's 25 WCU
deletion_protection_enabled = true              # destroy fails until an apply with false
log_retention_days          = 365
