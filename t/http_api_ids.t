#!/usr/bin/perl

# The API's server IDs stay with their peers: a resolve change that drops
# one address does not move the others' IDs, so a PATCH after it reaches
# the peer it names (and a peer patched down stays down); the dropped
# peer's ID is 404 until a later peer is given its slot.

use warnings;
use strict;

use Test::More;
use JSON::PP;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(7);

$t->write_file_expand('sluice.conf', <<'EOF2');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;
    resolver 127.0.0.1:%%PORT_8053%% valid=1s;
    resolver_timeout 500ms;

    upstream app {
        zone z 64k;
        server app.test:%%PORT_8081%% resolve;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { proxy_pass http://app; }
        location /api { api write=on; }
    }
}

EOF2

$t->write_file('dns.txt', "app.test A 127.0.0.1 1\napp.test A 127.0.0.2 1\n");
$t->dns(port(8053));
$t->run();

sub request {
	my ($method, $uri, $body) = @_;
	$body //= '';
	my $len = length $body;
	my $r = http("$method $uri HTTP/1.0\nHost: localhost\nContent-Length: $len\n\n",
		body => $body) // '';
	my ($code) = $r =~ /^HTTP\/1.1 (\d+)/;
	my ($b) = $r =~ /\r\n\r\n(.*)\z/s;
	return ($code // 0, eval { decode_json($b // '') });
}

# The upstream's servers by address: { 'ip:port' => server object }.
sub servers {
	my (undef, $v) = request('GET', '/api/9/http/upstreams/app/servers');
	return { map { $_->{server} => $_ } @{ref $v eq 'ARRAY' ? $v : []} };
}

my $p = port(8081);
my $s;
for (1 .. 100) {
	$s = servers();
	last if keys %$s == 2;
	select undef, undef, undef, 0.05;
}
is(scalar keys %$s, 2, 'two resolved servers');
my ($one, $two) = map { $s->{"127.0.0.$_:$p"}{id} // -1 } 1, 2;
isnt($one, $two, 'distinct IDs');

my ($code, $v) = request('PATCH', "/api/9/http/upstreams/app/servers/$two", '{"down":true}');
ok($code == 200 && $v->{server} eq "127.0.0.2:$p" && $v->{down}, 'PATCH down by ID');

# 127.0.0.1 leaves the answer; 127.0.0.2 keeps its ID and its down.
$t->write_file('dns.txt', "app.test A 127.0.0.2 1\n");
for (1 .. 100) {
	$s = servers();
	last if keys %$s == 1;
	select undef, undef, undef, 0.05;
}
is(join(' ', sort keys %$s), "127.0.0.2:$p", 'the dropped address is gone');
is($s->{"127.0.0.2:$p"}{id}, $two, 'the other server keeps its ID');
($code, $v) = request('GET', "/api/9/http/upstreams/app/servers/$two");
ok($code == 200 && $v->{server} eq "127.0.0.2:$p" && $v->{down}, '... and its down');
($code) = request('GET', "/api/9/http/upstreams/app/servers/$one");
is($code, 404, "the dropped server's ID is not found");
