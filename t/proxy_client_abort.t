#!/usr/bin/perl

# A client that goes away while the upstream is still working on its request
# (waiting for the response head, and connecting with proxy_connect_race)
# leaves no connection counted against the peer: the API's active count
# (what least_conn and max_conns go by) is back to zero.

use warnings;
use strict;

use Test::More;
use JSON::PP qw/decode_json/;
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy upstream_zone/)->plan(4);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream slow {
        zone slow 64k;
        least_conn;
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8083%%;
    }
    upstream hang {
        zone hang 64k;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        server 127.0.0.1:%%PORT_8084%% max_fails=0;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { proxy_pass http://slow; }
        location /hang/ {
            proxy_pass http://hang;
            proxy_connect_timeout 5s;
            proxy_connect_race 200ms;
        }
        location /api/ { api; }
    }
}

EOF

$t->backend(port(8081));
$t->backend(port(8083));
$t->blackhole(port(8082));
$t->blackhole(port(8084));
$t->run();

sub active {
	my $r = http_get("/api/9/http/upstreams/$_[0]") // '';
	my ($body) = $r =~ /\r\n\r\n(.*)/s;
	my $j = eval { decode_json($body // '') } // {};
	my $n = 0;
	$n += $_->{active} // 0 for @{$j->{peers} // []};
	return $n;
}

# Two requests wait for slow answers; their clients leave.
my @s = map { http_get('/slow/1/x', start => 1) } 1 .. 2;
sleep 0.3;
is(active('slow'), 2, 'two requests in flight');
close $_ for @s;
ok(poll_until(sub { active('slow') == 0 }, 3), 'clients gone: no connection left counted');

# Both peers hang in connect (racing); the client leaves mid-race.
my $h = http_get('/hang/x', start => 1);
ok(poll_until(sub { active('hang') == 2 }, 2), 'racing: both peers counted');
close $h;
ok(poll_until(sub { active('hang') == 0 }, 2), 'client gone mid-race: both released');
