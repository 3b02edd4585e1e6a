"""Serving securely: the endpoints (`endpoints`) and the audit webhook (sources.audit_webhook).

TLS with certificates that rotate, and callers authenticated and authorized by the API server (TokenReview,
SubjectAccessReview).
"""
