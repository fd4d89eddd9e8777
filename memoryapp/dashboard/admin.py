from django.contrib import admin

from memoryapp.dashboard.models import Membership


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "agent", "role"]
    list_filter = ["role", "agent"]
    search_fields = ["user__username", "agent__name"]
    autocomplete_fields = []
