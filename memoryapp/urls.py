"""URL map: the dashboard at /, login under /accounts/, the agent API under /api/v1,
and the admin."""

from django.contrib import admin
from django.urls import include, path

from memoryapp.api.api import api

urlpatterns = [
    path("", include("memoryapp.dashboard.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
]
