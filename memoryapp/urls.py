"""URL map: the dashboard at /, login under /accounts/, the agent API under /api/v1,
and the admin."""

from django.contrib import admin
from django.urls import include, path

from memoryapp.api.api import api
from memoryapp.api.mcp_http import mcp_endpoint
from memoryapp.dashboard.login_views import ThrottledLoginView

urlpatterns = [
    path("", include("memoryapp.dashboard.urls")),
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("ams/v1/", include("memoryapp.ams.urls")),  # /ams/<key>/v1/: http/middleware.py
    # MCP over streamable HTTP; /mcp/<key> for clients that send no headers: http/middleware.py
    path("mcp", mcp_endpoint, name="mcp"),
]
