"""Slack and Microsoft Teams in the portal: administrators turn each chat channel on or off
for the tenant and give its channel's incoming-webhook URL (on the Channels page); each
person gives a URL of their own and chooses, per category, whether they hear there (in the
preference centre); administrators set the default per category (the defaults page). The use
cases are db/delivery/chat_channels.py; every change is audited there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from litestar import post
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath
from litestar.plugins.htmx import HTMXRequest
from litestar.response import Redirect
from litestar.status_codes import HTTP_303_SEE_OTHER

from db.delivery.chat_channels import (
    chat_addresses,
    chat_choices,
    chat_defaults,
    chat_health,
    enabled_chat_channels,
    save_chat_address,
    save_chat_channel,
    save_chat_choice,
    save_chat_default,
)
from db.platform.tenancy import TenantTx, tenant_tx
from domain.delivery.chat import CHAT_CHANNELS, channel_label
from domain.delivery.preferences import CATEGORIES, valid_category
from domain.errors import Forbidden, InvalidInput
from portal.auth import CurrentViewer, Viewer
from portal.settings import app_settings

__all__ = [
    "CHAT_LABELS",
    "ROUTES",
    "ChannelForm",
    "ChatAddressForm",
    "ChatChoiceForm",
    "channels_page_context",
    "defaults_page_context",
    "preference_centre_context",
    "save_channel",
    "save_chat_choices",
    "save_chat_defaults",
    "save_own_chat_url",
]

CHAT_LABELS = {str(c): channel_label(c) for c in CHAT_CHANNELS}
MAX_URL = 2000  # characters
Form = Body(media_type=RequestEncodingType.URL_ENCODED)


def channels_page_context(tx: TenantTx) -> dict[str, Any]:
    return {"chat": chat_health(tx), "chat_labels": CHAT_LABELS}


def preference_centre_context(tx: TenantTx, user_id: int) -> dict[str, Any]:
    return {"chat_enabled": enabled_chat_channels(tx), "chat_addresses": chat_addresses(tx, user_id),
            "chat_choices": chat_choices(tx, user_id), "chat_labels": CHAT_LABELS,
            "chat_categories": CATEGORIES}


def defaults_page_context(tx: TenantTx) -> dict[str, Any]:
    return {"chat_enabled": enabled_chat_channels(tx), "chat_defaults": chat_defaults(tx),
            "chat_labels": CHAT_LABELS, "chat_categories": CATEGORIES}


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise Forbidden("only administrators turn channels on and off")
    return viewer


@dataclass
class ChannelForm:
    enabled: str = ""  # a checkbox: "on" when ticked
    webhook_url: str = ""
    keep_url: str = ""  # "on": leave the stored channel URL as it is


@post("/channels/{channel:str}", sync_to_thread=True)
def save_channel(request: HTMXRequest, viewer: CurrentViewer, channel: FromPath[str],
                 data: Annotated[ChannelForm, Form]) -> Redirect:
    _admin(viewer)
    if len(data.webhook_url) > MAX_URL:
        raise InvalidInput("the URL is too long")
    with tenant_tx(viewer.tenant.slug) as tx:
        save_chat_channel(tx, channel, enabled=data.enabled == "on", webhook_url=data.webhook_url,
                          keep_url=data.keep_url == "on" and not data.webhook_url.strip(),
                          allow_private=app_settings(request).webhook_allow_private,
                          by_user_id=viewer.user.id)
    return Redirect(f"/channels?done={channel}#channel-{channel}", status_code=HTTP_303_SEE_OTHER)


@dataclass
class ChatAddressForm:
    webhook_url: str = ""  # empty: remove


@post("/preferences/chat/{channel:str}", sync_to_thread=True)
def save_own_chat_url(request: HTMXRequest, viewer: CurrentViewer, channel: FromPath[str],
                      data: Annotated[ChatAddressForm, Form]) -> Redirect:
    if len(data.webhook_url) > MAX_URL:
        raise InvalidInput("the URL is too long")
    with tenant_tx(viewer.tenant.slug) as tx:
        save_chat_address(tx, viewer.user.id, channel, data.webhook_url,
                          allow_private=app_settings(request).webhook_allow_private)
    return Redirect("/preferences#chat-title", status_code=HTTP_303_SEE_OTHER)


@dataclass
class ChatChoiceForm:
    slack: str = ""  # checkboxes: "on" when ticked
    teams: str = ""


def _ticked(data: ChatChoiceForm, channels: list[str]) -> dict[str, bool]:
    return {c: getattr(data, c) == "on" for c in channels}


@post("/preferences/categories/{category:str}/chat", sync_to_thread=True)
def save_chat_choices(viewer: CurrentViewer, category: FromPath[str],
                      data: Annotated[ChatChoiceForm, Form]) -> Redirect:
    category = valid_category(category)
    with tenant_tx(viewer.tenant.slug) as tx:
        for channel, wanted in _ticked(data, [str(c) for c in enabled_chat_channels(tx)]).items():
            save_chat_choice(tx, viewer.user.id, category, channel, wanted)
    return Redirect(f"/preferences#chat-{category}", status_code=HTTP_303_SEE_OTHER)


@post("/preferences/defaults/{category:str}/chat", sync_to_thread=True)
def save_chat_defaults(viewer: CurrentViewer, category: FromPath[str],
                       data: Annotated[ChatChoiceForm, Form]) -> Redirect:
    _admin(viewer)
    category = valid_category(category)
    with tenant_tx(viewer.tenant.slug) as tx:
        for channel, wanted in _ticked(data, [str(c) for c in enabled_chat_channels(tx)]).items():
            save_chat_default(tx, category, channel, wanted)
    return Redirect(f"/preferences/defaults#chat-{category}", status_code=HTTP_303_SEE_OTHER)


ROUTES = [save_channel, save_own_chat_url, save_chat_choices, save_chat_defaults]
