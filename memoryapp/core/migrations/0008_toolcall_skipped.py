from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0007_toolcall_call_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="toolcall",
            name="skipped",
            field=models.BooleanField(default=False),
        ),
    ]
