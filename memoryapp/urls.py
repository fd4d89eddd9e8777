"""URL map: the agent API under /api/v1, the admin, and the home page."""

from django.contrib import admin
from django.urls import path
from django.views.generic import TemplateView

from memoryapp.api.api import api

urlpatterns = [
    path("", TemplateView.as_view(template_name="home.html"), name="home"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
]
