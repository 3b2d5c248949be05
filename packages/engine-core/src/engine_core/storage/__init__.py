"""State store adapters. Import ``storage.dynamodb`` by name: it is the only module that needs boto3."""
