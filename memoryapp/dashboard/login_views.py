"""Login with throttling: after repeated failures for a user name, or from an address,
the form refuses (429) until the window ends, without checking the password, so guessing
stops working rather than slowing down."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse

from memoryapp.http import ratelimit
from memoryapp.http.auth import client_address


def _limit() -> ratelimit.Limit:
    return ratelimit.Limit.parse(settings.MEMORYAPP_LOGIN_FAILURES)


def _who(request: HttpRequest) -> tuple[str, str]:
    name = (request.POST.get("username") or "").strip().lower()[:150]
    return name, client_address(request)


class ThrottledLoginView(LoginView):
    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        name, address = _who(request)
        limit = _limit()
        retry_after = ratelimit.blocked("login-user", name, limit) or ratelimit.blocked(
            "login-address", address, limit
        )
        if retry_after is not None:
            form = self.get_form()
            minutes = max(1, round(retry_after / 60))
            form.errors.clear()
            unit = "minute" if minutes == 1 else "minutes"
            form.add_error(None, f"Too many failed logins. Try again in {minutes} {unit}.")
            response = self.render_to_response(self.get_context_data(form=form), status=429)
            response["Retry-After"] = str(retry_after)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        name, address = _who(self.request)
        limit = _limit()
        ratelimit.hit("login-user", name, limit)
        ratelimit.hit("login-address", address, limit)
        return super().form_invalid(form)

    def form_valid(self, form):
        name, _ = _who(self.request)
        ratelimit.reset("login-user", name, _limit())
        return super().form_valid(form)
