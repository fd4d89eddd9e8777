"""The Redis Agent Memory Server API, included at ams/v1/ (the API middleware routes
/ams/<key>/v1/… here, the key taken out of the path)."""

from django.urls import path

from memoryapp.ams.api import ams_api

urlpatterns = [path("", ams_api.urls)]
