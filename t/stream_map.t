#!/usr/bin/perl

# The map module in stream, and proxy_pass with variables (what ssl_preread
# routing needs: map a name to a backend, proxy_pass $backend): the result
# names an upstream block, an address:port, or a name:port looked up with the
# stream resolver; a result with no port, or a name with no answer, closes
# the session with an [error] and $status 500 or 502. Map regex captures,
# hostnames masks through a map of a map, and map variables in return and
# access_log.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/stream/)->plan(11);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

stream {
    resolver 127.0.0.1:%%PORT_8053%% valid=30s;
    log_format m "$server_port $status $backend [$upstream_addr]";
    access_log %%TESTDIR%%/stream.log m;

    map $server_port $backend {
        %%PORT_8070%%  up;
        %%PORT_8071%%  127.0.0.1:%%PORT_8082%%;
        %%PORT_8072%%  app.test:%%PORT_8081%%;
        %%PORT_8073%%  up:1;
        %%PORT_8074%%  nowhere;
        %%PORT_8075%%  missing.test:%%PORT_8081%%;
    }

    upstream up { server 127.0.0.1:%%PORT_8081%%; }

    map $server_port $name {
        %%PORT_8076%%  www.Example.com;
        default        other.org;
    }
    map $name $kind {
        hostnames;
        *.example.com  star;
        default        plain;
    }
    map $remote_addr $who {
        ~^(\d+)\.(?<rest>.*)$  "first=$1 rest=$rest";
    }

    server { listen 127.0.0.1:%%PORT_8070%%; proxy_pass $backend; }
    server { listen 127.0.0.1:%%PORT_8071%%; proxy_pass $backend; }
    server { listen 127.0.0.1:%%PORT_8072%%; proxy_pass $backend; }
    server { listen 127.0.0.1:%%PORT_8073%%; proxy_pass $backend; }
    server { listen 127.0.0.1:%%PORT_8074%%; proxy_pass $backend; }
    server { listen 127.0.0.1:%%PORT_8075%%; proxy_pass $backend; }
    server { listen 127.0.0.1:%%PORT_8076%%; return "$kind $who\n"; }
    server { listen 127.0.0.1:%%PORT_8077%%; return "$kind\n"; }
}

EOF

$t->write_file('dns.txt', "app.test A 127.0.0.1 30\n");
$t->dns(port(8053));
$t->backend(port(8081), close => 1);
$t->backend(port(8082), close => 1);
$t->run();

sub via {
	my ($port) = @_;
	return http_get('/', PeerAddr => '127.0.0.1:' . port($port)) // '';
}

sub port_of { my ($p) = $_[0] =~ /^X-Port: (\d+)/mi; $p // 'none' }

is(port_of(via(8070)), port(8081), 'proxy_pass $var: an upstream block');
is(port_of(via(8071)), port(8082), 'proxy_pass $var: an address');
is(port_of(via(8072)), port(8081), 'proxy_pass $var: a name through the resolver');
is(via(8073), '', 'proxy_pass $var: a port makes it an address, not the upstream');
is(via(8074), '', 'proxy_pass $var: no port');
ok($t->waitforlog(qr/\[error\].*no port in upstream "nowhere", client: 127\.0\.0\.1, server: 127\.0\.0\.1:${\ port(8074)}/),
	'no port: logged');
is(via(8075), '', 'proxy_pass $var: a name with no answer');
ok($t->waitforlog(qr/\[error\].*missing\.test could not be resolved \(3: Host not found\)/),
	'no answer: logged');

is(via(8076), "star first=127 rest=0.0.1\n", 'map of a map, hostnames, regex captures');
is(via(8077), "plain\n", 'default');

my ($p70, $p74, $p81) = (port(8070), port(8074), port(8081));
ok($t->waitforlog(qr/^$p70 200 up \[127\.0\.0\.1:$p81\]$/m, 1, 'stream.log')
	&& $t->waitforlog(qr/^$p74 500 nowhere \[-\]$/m, 1, 'stream.log'),
	'map variables in the access log, $status of a failed session');

