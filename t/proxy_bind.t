#!/usr/bin/perl

# proxy_bind: upstream connections from the address given (fixed or from a
# variable; empty binds nothing), off in a nested location, an invalid
# address from a variable is a 500 with nginx's error line, transparent
# refused at load with a clear message.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy/)->plan(7);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        location / {
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
            proxy_bind 127.0.0.2;
            location /off { proxy_pass http://127.0.0.1:%%PORT_8081%%; proxy_bind off; }
        }
        location /var { proxy_pass http://127.0.0.1:%%PORT_8081%%; proxy_bind $arg_b; }
    }
    server {
        listen 127.0.0.1:%%PORT_8081%%;
        access_log off;
        return 200 "from $remote_addr";
    }
}

EOF

$t->run();

like(http_get('/'), qr/from 127\.0\.0\.2$/, 'bound');
like(http_get('/off'), qr/from 127\.0\.0\.1$/, 'off');
like(http_get('/var?b=127.0.0.3'), qr/from 127\.0\.0\.3$/, 'from a variable');
my $rv = http_get('/var');
like($rv, qr/from 127\.0\.0\.1$/, 'empty: not bound');
like(http_get('/var?b=nowhere'), qr/^HTTP\/1\.1 500 /, 'invalid address');
ok($t->waitforlog(qr/\[error\] .*invalid local address "nowhere"/), 'logged');

$t->stop();
$t->write_file_expand('sluice.conf', <<'EOF');
%%TEST_GLOBALS%%
events {
}
http {
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { proxy_pass http://127.0.0.1:%%PORT_8081%%; proxy_bind 127.0.0.2 transparent; }
    }
}
EOF
my $d = $t->testdir();
my (undef, undef, $err) = $t->run_binary('-t', '-p', "$d/", '-c', "$d/sluice.conf");
like($err, qr/\[emerg\] "proxy_bind \.\.\. transparent" is not supported .* in \S+sluice\.conf:\d+$/m, 'transparent refused');
