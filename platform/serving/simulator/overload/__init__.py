"""The overload scenario: admission policies on one engine model, under generated
multi-tenant loads (`loraplex simulate --scenario overload`)."""
