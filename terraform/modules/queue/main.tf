# The step queue and its dead-letter queue.
locals {
  # AWS guidance for an SQS event source: visibility timeout >= 6 x the function timeout, plus the
  # batching window, so a message throttled or retried by Lambda is not handed to a second worker
  # while the first still runs. Lambda also rejects an event source mapping whose function timeout
  # exceeds the queue's visibility timeout. Derived, never an input.
  visibility_timeout_s = 6 * var.consumer_timeout_s + var.consumer_batching_window_s

  dlq_name = coalesce(var.dlq_name, "${var.name}-dlq")

  # SSE-SQS unless a customer-managed key is given. The two settings are mutually exclusive.
  kms_master_key_id       = var.kms_master_key_id
  sqs_managed_sse_enabled = var.kms_master_key_id == null ? true : null
}

resource "aws_sqs_queue" "dlq" {
  count = var.create ? 1 : 0

  #checkov:skip=CKV2_AWS_73:A customer-managed KMS key is optional (var.kms_master_key_id); without it the queue uses SSE-SQS (service-managed keys, no KMS charges).

  name                              = local.dlq_name
  message_retention_seconds         = var.dlq_message_retention_s
  sqs_managed_sse_enabled           = local.sqs_managed_sse_enabled
  kms_master_key_id                 = local.kms_master_key_id
  kms_data_key_reuse_period_seconds = local.kms_master_key_id == null ? null : var.kms_data_key_reuse_period_s

  tags = var.tags
}

resource "aws_sqs_queue" "this" {
  count = var.create ? 1 : 0

  #checkov:skip=CKV2_AWS_73:A customer-managed KMS key is optional (var.kms_master_key_id); without it the queue uses SSE-SQS (service-managed keys, no KMS charges).

  name                              = var.name
  visibility_timeout_seconds        = local.visibility_timeout_s
  message_retention_seconds         = var.message_retention_s
  receive_wait_time_seconds         = var.receive_wait_time_s
  sqs_managed_sse_enabled           = local.sqs_managed_sse_enabled
  kms_master_key_id                 = local.kms_master_key_id
  kms_data_key_reuse_period_seconds = local.kms_master_key_id == null ? null : var.kms_data_key_reuse_period_s

  tags = var.tags

  lifecycle {
    # aws_sqs_queue_redrive_policy.this owns the redrive policy. Without this the queue resource reads
    # the policy back and plans to rewrite it on every run (a whitespace-only JSON diff).
    ignore_changes = [redrive_policy]

    precondition {
      condition     = local.visibility_timeout_s <= 43200
      error_message = "The derived visibility timeout (6 x consumer_timeout_s + consumer_batching_window_s = ${local.visibility_timeout_s} s) exceeds SQS's 43200 s maximum: lower the worker timeout or batching window."
    }
  }
}

# A separate resource rather than the queue's redrive_policy argument, so that both queues are
# created at the same time: the AWS provider waits about 25 s after creating each queue for its
# attributes to settle, and the inline form serializes DLQ -> queue. The functions need only the
# queue, so they are created while this resource waits.
resource "aws_sqs_queue_redrive_policy" "this" {
  count = var.create ? 1 : 0

  queue_url = aws_sqs_queue.this[0].id

  # Lambda-throttled receives also count towards maxReceiveCount, so a small value dead-letters
  # valid messages that never ran; the variable is validated >= 5 (AWS's recommendation).
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq[0].arn
    maxReceiveCount     = var.max_receive_count
  })
}
