from django.urls import path

from memoryapp.dashboard import views

app_name = "dashboard"
urlpatterns = [
    path("", views.agents_overview, name="agents"),
    path("agents/<slug:name>/", views.agent_detail, name="agent"),
    path("agents/<slug:name>/sessions/<str:key>/", views.session_detail, name="session"),
    path("agents/<slug:name>/sessions/<str:key>/older/", views.session_older, name="older"),
    path("agents/<slug:name>/sessions/<str:key>/live/", views.session_live, name="live"),
]
