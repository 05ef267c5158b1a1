"""Single sign-on for the console: OpenID Connect identity providers (authorization code with
PKCE), how their users map to tenants and roles, and renewal of signed-in sessions."""
